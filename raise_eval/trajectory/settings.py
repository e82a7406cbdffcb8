"""The settings of log Z along training, declared once (`raise_eval.settings`): `TrajectorySettings` for a saved
run's checkpoints (`evaluate_trajectory`, `raise-eval trajectory`), `TrackSettings` for a training monitor's
persistent chains (`LikelihoodMonitor(..., track=...)`)."""

from __future__ import annotations

from typing import Optional, Union

from raise_eval.diagnostics import GAP_NATS
from raise_eval.evaluation.settings import INITS
from raise_eval.exact import DEFAULT_MAX_UNITS
from raise_eval.settings import SettingsError, progress_setting, setting, settings_class, threads_setting

TRAJECTORY_EXACT = ("auto", "always", "never")
TRAJECTORY_LINKS = ("fixed", "adaptive")


@settings_class
class TrajectorySettings:
    """Log Z and the test log-likelihood sandwich at every checkpoint of one training run.

    One AIS pass along the trajectory path (the start, then the checkpoints in order, `steps` sub-steps per link)
    gives log Z at every checkpoint; BAR between neighbouring checkpoints, from the same chains, is a second
    estimate (not independent of AIS's) with a health check per link; RAISE along the path truncated at a checkpoint gives that checkpoint's
    conservative log-likelihood. The seeds: AIS `seed`, RAISE `seed + 1`, BAR's bootstrap `seed + 2`, the RAISE
    subset `seed + 3`, log f(v) estimates `seed + 4`, the adaptive links' pilot `seed + 5`, `test_subset` `seed + 6`.
    """

    init: str = setting(
        "base-rates",
        "the independent start put before the first checkpoint (unless that one has no weights): data base rates "
        "(visible biases = logit of the training pixel means, hidden uniform: where a training run's biases start) "
        "or uniform",
        kind="choice", numbers="result", choices=INITS, flag="--init", group="annealing",
    )  # fmt: skip
    steps: int = setting(
        100,
        "sub-steps between consecutive checkpoints (linear interpolation of the parameters)",
        kind="count", numbers="result", least=1, flag="--steps", short=("-K",), metavar="K", group="annealing",
    )  # fmt: skip
    start_steps: Optional[int] = setting(
        None,
        "sub-steps of the first link, from the start to the first checkpoint (a full temperature path when that "
        "checkpoint is already trained, e.g. a pretrained DBM)",
        kind="count", numbers="result", least=1, none="--steps", flag="--start-steps", metavar="K", group="annealing",
    )  # fmt: skip
    ais_chains: int = setting(
        1000, "AIS chains of the pass through every checkpoint", kind="count", numbers="result", least=2,
        why="a standard error needs two", flag="--ais-chains", metavar="M", group="annealing",
    )  # fmt: skip
    resample_ess: float = setting(
        0.0,
        "sequential Monte Carlo: after every sub-step's weight update, resample the chains of a replicate group whose "
        "effective sample size falls below this fraction of its chains (systematic resampling within the group, "
        "the group's mean weight folded into its log Z, then --rejuvenation-sweeps Gibbs sweeps at the current "
        "parameters); 0 never resamples (plain AIS)",
        kind="number", numbers="result", least=0, most=1, flag="--resample-ess", metavar="FRACTION",
        group="annealing",
    )  # fmt: skip
    replicates: int = setting(
        10,
        "with --resample-ess above 0: independent groups the AIS chains are split into, each resampled only within "
        "itself; log Z is the average of their Z estimates and its standard error their spread's",
        kind="count", numbers="result", least=2, why="a standard error needs two", flag="--replicates", metavar="G",
        group="annealing",
    )  # fmt: skip
    rejuvenation_sweeps: int = setting(
        1,
        "with --resample-ess above 0: Gibbs sweeps at the current parameters after a sub-step that resampled, "
        "besides the one the next sub-step makes",
        kind="count", numbers="result", least=0, flag="--rejuvenation-sweeps", metavar="S", group="annealing",
    )  # fmt: skip
    links: str = setting(
        "fixed",
        "how each link's sub-steps are chosen: fixed (--steps, --start-steps, evenly spaced) or adaptive (a pilot "
        "of --pilot-chains chains, its own random stream, chooses by bisection the sub-steps that keep the "
        "conditional ESS of every sub-step's weights at or above --target-cess, and re-anchors in temperature each "
        "checkpoint its temperature probe reaches more than --anchor-margin nats higher; then a fresh SMC run "
        "follows that plan, so that log Z stays unbiased)",
        kind="choice", numbers="result", choices=TRAJECTORY_LINKS, flag="--links", group="annealing",
    )  # fmt: skip
    target_cess: float = setting(
        0.9,
        "with --links adaptive: the conditional effective sample size, as a fraction of the chains, every sub-step "
        "keeps (higher: more, smaller sub-steps)",
        kind="number", numbers="result", least=0, most=1, strictly=True, flag="--target-cess", metavar="FRACTION",
        group="annealing",
    )  # fmt: skip
    pilot_chains: int = setting(
        200, "with --links adaptive: the pilot's chains", kind="count", numbers="result", least=2,
        why="an effective sample size needs two", flag="--pilot-chains", metavar="M", group="annealing",
    )  # fmt: skip
    max_link_steps: int = setting(
        1000, "with --links adaptive: at most this many sub-steps per link (and per temperature link)", kind="count",
        numbers="result", least=1, flag="--max-link-steps", metavar="K", group="annealing",
    )  # fmt: skip
    max_sweeps: Optional[int] = setting(
        None,
        "with --links adaptive: the pilot sweeps after a resampling until the chains' log f correlates with the "
        "resampled copies' below 0.5, from --rejuvenation-sweeps up to this many, and the run uses the most each link "
        "needed",
        kind="count", numbers="result", least=0, none="--rejuvenation-sweeps", flag="--max-sweeps", metavar="S",
        group="annealing",
    )  # fmt: skip
    anchor_margin: Optional[float] = setting(
        0.5,
        "with --links adaptive: re-anchor a checkpoint (the run restarts there from the start, in temperature) when "
        "the pilot's temperature probe of its log Z exceeds the trajectory's by more than this many nats",
        kind="number", numbers="result", least=0, none="never re-anchor", flag="--anchor-margin", metavar="NATS",
        group="annealing",
    )  # fmt: skip
    raise_examples: int = setting(
        100, "test vectors RAISE runs on, a random subset (all if fewer)", kind="count", numbers="result", least=2,
        why="a standard error needs two", flag="--raise-examples", metavar="N", group="annealing",
    )  # fmt: skip
    raise_chains: int = setting(
        20, "RAISE chains per test vector", kind="count", numbers="result", least=1, flag="--raise-chains", metavar="C",
        group="annealing",
    )  # fmt: skip
    raise_checkpoints: int = setting(
        5,
        "checkpoints RAISE runs at, evenly spread and the last always among them (RAISE of a checkpoint anneals back "
        "through every link before it, so its cost grows with the checkpoint's place)",
        kind="count", numbers="result", least=1, flag="--raise-checkpoints", metavar="N", group="annealing",
    )  # fmt: skip
    bootstrap: int = setting(
        200, "bootstrap replicas of BAR's standard errors (chains resampled)", kind="count", numbers="result", least=2,
        flag="--bootstrap", metavar="B", group="annealing",
    )  # fmt: skip
    tolerance: float = setting(
        GAP_NATS,
        "the last checkpoint's verdict: closed when AIS - RAISE is within TOL nats with small standard errors and no "
        "warning that undermines either side (the conditions of a certified evaluation)",
        kind="number", least=0, strictly=True, flag="--tolerance", metavar="TOL", group="annealing",
    )  # fmt: skip
    exact: str = setting(
        "auto",
        "exact log Z (and log-likelihood) of every checkpoint where at most --max-exact-units units must be "
        "enumerated: auto (and, beyond about 2 x 10^11 multiply-add equivalents for all checkpoints, 10 to 20 s on "
        "one core, no costlier than the estimators), always (whatever it costs), or never",
        kind="choice", numbers="result", choices=TRAJECTORY_EXACT, flag="--exact", group="run",
    )  # fmt: skip
    max_exact_units: int = setting(
        DEFAULT_MAX_UNITS, "exact='auto' enumerates at most 2^N states per checkpoint", kind="count",
        numbers="result", least=1,
        flag="--max-exact-units", metavar="N", group="run",
    )  # fmt: skip
    log_f_samples: int = setting(
        500,
        "DBMs: importance samples per test vector for log f(v) at each checkpoint (mean-field proposal), when it is "
        "not enumerated",
        kind="count", numbers="result", least=1, flag="--log-f-samples", metavar="S", group="DBMs",
    )  # fmt: skip
    test_subset: Optional[int] = setting(
        None,
        "average over a fixed random subset of N test vectors (drawn with seed + 6): a DBM's log f(v) is estimated "
        "at every checkpoint",
        kind="count", numbers="result", least=2, why="a standard error needs two", none="all", flag="--test-subset",
        metavar="N",
        group="data",
    )  # fmt: skip
    seed: int = setting(
        0, "random seed; the same seed and device give the same numbers", kind="seed", numbers="result",
        flag="--seed", group="run",
    )  # fmt: skip
    progress: bool = progress_setting()
    threads: Union[str, int, None] = threads_setting()

    def _validate(self) -> None:
        grouped = self.resample_ess > 0 or self.links == "adaptive"  # the run is then SMC in replicate groups
        if grouped and (self.ais_chains % self.replicates or self.ais_chains < 2 * self.replicates):
            raise SettingsError(
                f"{{ais_chains}} ({self.ais_chains}) must be a multiple of {{replicates}} ({self.replicates}) with at "
                "least two chains per replicate when {resample_ess} is above 0 or {links} is adaptive: change either",
                ("ais_chains", "replicates", "resample_ess", "links"),
            )


@settings_class
class TrackSettings:
    """A training monitor's log Z along training: `chains` persistent AIS chains, started from the exact start
    distribution at the first call (`start_steps` sub-steps to the first model) and advanced at every later call
    by `steps` sub-steps through the parameters since the last call, their log-weights carried along (an AIS run
    through the training trajectory, one piece per call). RAISE along the parameters kept from every call, and a
    verdict, run at `final()` and every `verdict_every` records. The start (`init`), the RAISE subset's size and
    chains, the exact values and the seed are the monitor's evaluation settings."""

    chains: int = setting(
        100, "persistent AIS chains", kind="count", numbers="result", least=2, why="a standard error needs two"
    )
    steps: int = setting(
        20, "sub-steps per call, through the parameters since the last call (linear interpolation)", kind="count",
        numbers="result",
        least=1,
    )  # fmt: skip
    start_steps: int = setting(
        100, "sub-steps of the first call, from the start distribution to the first model", kind="count",
        numbers="result", least=1,
    )  # fmt: skip
    resample_ess: float = setting(
        0.0,
        "sequential Monte Carlo: after every sub-step, resample the chains of a replicate group whose effective sample "
        "size falls below this fraction of its chains, then move them by rejuvenation_sweeps Gibbs sweeps; 0 never "
        "resamples (plain AIS)",
        kind="number", numbers="result", least=0, most=1,
    )  # fmt: skip
    replicates: int = setting(
        10,
        "with resample_ess above 0: independent groups the chains are split into (log Z their Z estimates' average, "
        "its standard error their spread's)",
        kind="count", numbers="result", least=2, why="a standard error needs two",
    )  # fmt: skip
    rejuvenation_sweeps: int = setting(
        1, "with resample_ess above 0: Gibbs sweeps at the current parameters after a sub-step that resampled",
        kind="count", numbers="result", least=0,
    )  # fmt: skip
    anchor_margin: Optional[float] = setting(
        None,
        "re-anchor: at every call a pilot (pilot_chains chains following the trajectory, and a temperature probe "
        "from the start to the call's model, on their own stream) compares the two estimates of log Z; where the "
        "probe's is higher by more than this many nats, the chains restart from the start and anneal to the model "
        "in temperature (start_steps sub-steps)",
        kind="number", numbers="result", least=0, none="never re-anchor",
    )  # fmt: skip
    pilot_chains: int = setting(
        50, "with anchor_margin: the pilot's chains (and its probe's)", kind="count", numbers="result", least=2,
        why="a log Z estimate needs two",
    )  # fmt: skip
    verdict_every: Optional[int] = setting(
        None, "also run RAISE along the trajectory so far and give a verdict every N records", kind="count", least=1,
        none="at final() only",
    )  # fmt: skip
    tolerance: float = setting(
        GAP_NATS, "the verdict's tolerance in nats (the conditions of a certified evaluation)", kind="number", least=0,
        strictly=True,
    )  # fmt: skip

    def _validate(self) -> None:
        if self.resample_ess > 0 and (self.chains % self.replicates or self.chains < 2 * self.replicates):
            raise SettingsError(
                f"{{chains}} ({self.chains}) must be a multiple of {{replicates}} ({self.replicates}) with at least "
                "two chains per replicate when {resample_ess} is above 0: change either",
                ("chains", "replicates", "resample_ess"),
            )
