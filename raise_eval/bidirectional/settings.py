"""`BDMCSettings`: the settings of a BDMC run (`evaluate_bdmc`, `raise-eval bdmc`), declared once
(`raise_eval.settings`); the command's options are generated from these declarations."""

from __future__ import annotations

from typing import Optional, Union

from raise_eval.schedules import SCHEDULES
from raise_eval.settings import SettingsError, progress_setting, setting, settings_class, threads_setting

DEFAULT_AIDE_EXAMPLES = 20
AIDE_DEFAULTS = {"aide_ng": 20, "aide_nt": 20, "aide_mg": 2, "aide_mt": 1}  # AIDE paper's Ng, Nt, Mg, Mt
AIDE_FIELDS = ("aide_examples", "aide_steps", "aide_ng", "aide_nt", "aide_mg", "aide_mt")
# The pre-0.2 API's aide_settings keys, by field.
AIDE_KEYS = {"num_examples": "aide_examples", "steps": "aide_steps", "Ng": "aide_ng", "Nt": "aide_nt",
             "Mg": "aide_mg", "Mt": "aide_mt"}  # fmt: skip


@settings_class
class BDMCSettings:
    """The BDMC protocol's settings: simulated examples, the forward and reverse AIS at each K, the HMC pilot, the
    encoder baselines, the real-data subset and AIDE. Checked when built; `replace(**changes)` gives a checked copy."""

    num_examples: int = setting(
        100, "simulated examples", kind="count", numbers="result", least=1, flag="--examples", metavar="N",
        group="simulation",
    )  # fmt: skip
    chains: int = setting(
        4, "forward and reverse AIS chains per example", kind="count", numbers="result", least=1, flag="--chains",
        metavar="C",
        group="annealing",
    )  # fmt: skip
    steps: tuple = setting(
        (100, 1000, 10000), "numbers of intermediate distributions K", kind="counts", numbers="result", least=1,
        flag="--steps",
        short=("-K",), metavar="K", group="annealing",
    )  # fmt: skip
    schedule: str = setting(
        "sigmoid", "spacing of the inverse temperatures (sigmoid: the BDMC paper's)", kind="choice", numbers="result",
        choices=SCHEDULES, flag="--schedule", group="annealing",
    )  # fmt: skip
    num_leapfrog: int = setting(
        10, "HMC leapfrog steps per transition", kind="count", numbers="result", least=1, flag="--leapfrog",
        metavar="L",
        group="annealing",
    )  # fmt: skip
    target_accept: float = setting(
        0.65, "the HMC pilot's target acceptance rate", kind="number", numbers="result", least=0, most=1, strictly=True,
        why="the BDMC paper's 0.65", flag="--target-accept", metavar="RATE", group="annealing",
    )  # fmt: skip
    pilot_chains: int = setting(
        4, "chains per example in the HMC pilot", kind="count", numbers="result", least=1, flag="--pilot-chains",
        metavar="C",
        group="annealing",
    )  # fmt: skip
    pilot_steps: int = setting(
        500, "K of the HMC pilot (or the largest K asked for, when smaller)", kind="count", numbers="result", least=1
    )
    iwae_samples: tuple = setting(
        (1, 100, 1000), "IWAE sample sizes", kind="counts", numbers="result", least=1, flag="--iwae", metavar="k",
        group="baselines",
    )  # fmt: skip
    elbo_samples: int = setting(
        100, "samples for the ELBO", kind="count", numbers="result", least=1, flag="--elbo-samples", metavar="S",
        group="baselines",
    )  # fmt: skip
    real_examples: int = setting(
        100, "with real data: real test vectors used, a random subset (all if fewer)", kind="count",
        numbers="result", least=1,
        flag="--real-examples", metavar="N", group="real data",
    )  # fmt: skip
    aide: bool = setting(
        False, "run AIDE: the encoder against AIS as the gold standard", kind="flag", numbers="result",
        flag="--aide", group="AIDE",
    )  # fmt: skip
    aide_examples: Optional[int] = setting(
        None, "with --aide: simulated examples AIDE runs on, at most --examples", kind="count", numbers="result",
        least=1,
        none=f"{DEFAULT_AIDE_EXAMPLES}, or --examples if fewer", flag="--aide-examples", metavar="N", group="AIDE",
    )  # fmt: skip
    aide_steps: Optional[int] = setting(
        None, "with --aide: K of AIDE's AIS", kind="count", numbers="result", least=1, none="the largest --steps",
        flag="--aide-steps", metavar="K", group="AIDE",
    )  # fmt: skip
    aide_ng: Optional[int] = setting(
        None, "with --aide: Ng, AIS runs per example", kind="count", numbers="result", least=1,
        none=str(AIDE_DEFAULTS["aide_ng"]),
        flag="--aide-ng",
        metavar="N", group="AIDE",
    )  # fmt: skip
    aide_nt: Optional[int] = setting(
        None, "with --aide: Nt, encoder draws per example", kind="count", numbers="result", least=1,
        none=str(AIDE_DEFAULTS["aide_nt"]),
        flag="--aide-nt",
        metavar="N", group="AIDE",
    )  # fmt: skip
    aide_mg: Optional[int] = setting(
        None, "with --aide: Mg, AIS meta-inference traces", kind="count", numbers="result", least=1,
        none=str(AIDE_DEFAULTS["aide_mg"]),
        flag="--aide-mg",
        metavar="M", group="AIDE",
    )  # fmt: skip
    aide_mt: Optional[int] = setting(
        None, "with --aide: Mt, encoder meta-inference traces (exact: 1 suffices)", kind="count", numbers="result",
        least=1,
        none=str(AIDE_DEFAULTS["aide_mt"]), flag="--aide-mt", metavar="M", group="AIDE",
    )  # fmt: skip
    seed: int = setting(0, "random seed", kind="seed", numbers="result", flag="--seed", group="run")
    progress: bool = progress_setting()
    threads: Union[str, int, None] = threads_setting()

    def _validate(self) -> None:
        object.__setattr__(self, "steps", tuple(sorted(self.steps)))
        given = [name for name in AIDE_FIELDS if getattr(self, name) is not None]
        if given and not self.aide:
            raise SettingsError(
                f"{', '.join('{' + g + '}' for g in given)} belong{'s' if len(given) == 1 else ''} to AIDE: give "
                "{aide} too",
                (*given, "aide"),
            )
        if self.aide and self.aide_examples is not None and self.aide_examples > self.num_examples:
            raise SettingsError(
                f"AIDE runs on {self.aide_examples} of the simulated examples ({{aide_examples}}), but only "
                f"{self.num_examples} are simulated ({{num_examples}}): ask for at most {self.num_examples}"
            )

    # ------------------------------------------------------------------ what the settings resolve to
    @property
    def aide_plan(self) -> Optional[dict[str, int]]:
        """AIDE's examples, K and trace counts, defaults filled in; None without AIDE."""
        if not self.aide:
            return None
        return {
            "num_examples": min(DEFAULT_AIDE_EXAMPLES, self.num_examples)
            if self.aide_examples is None
            else self.aide_examples,
            "steps": max(self.steps) if self.aide_steps is None else self.aide_steps,
            **{
                key: AIDE_DEFAULTS[name] if getattr(self, name) is None else getattr(self, name)
                for key, name in AIDE_KEYS.items()
                if name in AIDE_DEFAULTS
            },
        }
