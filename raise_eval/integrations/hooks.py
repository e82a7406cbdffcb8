"""Log the AIS/RAISE sandwich of a Boltzmann machine while it trains.

`LikelihoodMonitor` is a callable `monitor(epoch, model)` for a plain PyTorch training loop (it is the `callback`
of `raise_eval.models.training.rbm.train_rbm` as it stands). Every `every` epochs it runs
`raise_eval.evaluate.evaluate` on the test set with the same seed each time, so every logged number is exactly
what a stand-alone `evaluate(model, test_data, **monitor.evaluate_kwargs)` of that epoch's model gives, and
records a `SandwichRecord` (AIS, RAISE, their gap, the exact value when the model is small enough). Optionally it
hands the numbers to a logger callable (TensorBoard, wandb, ...), rewrites a CSV or JSON history and redraws a PNG
of the sandwich after each record. For Lightning, `raise_eval.integrations.lightning.SandwichCallback` wraps a monitor.

An energy model (`raise_eval.EnergyModel`, your own energy function) is monitored the same way by a monitor made with
`energy=True` (or `energy=EnergySettings(...)`): every call runs `evaluate_energy` (`integrations.energy_monitor`);
its kernels differentiate the energy in its input, never touching the parameters' gradients.

The settings are a `MonitorSettings` (declared once, checked when the monitor is made, so that a typo fails before
training): how often, where the history and plot go, and the `EvaluateSettings` of each evaluation, whose defaults
here are cheap ones for monitoring (`MONITOR_EVALUATION`); compare final models with the command's defaults.

With `track` (a `TrackSettings`, or True for its defaults) the monitor instead follows log Z along training: persistent
AIS chains advanced at every call through the parameters since the last call (`raise_eval.trajectory.online`), a
`TrajectoryRecord` per call (log Z, its standard error and ESS, and the AIS log-likelihood where log f(v) is exact)
at a small fraction of a full evaluation's cost; RAISE back along the same trajectory, and a verdict, at `final()`
and every `track.verdict_every` records.

Epochs count from 0, as `train_rbm` passes them (and as Lightning's `trainer.current_epoch` does in an epoch-end
hook): epoch e is the state after e + 1 passes over the data. With `every=k` the monitor evaluates after epochs
0, k, 2k, ..., so the first epoch always gives a point; `monitor.final(epoch, model)` adds the last one.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from raise_eval.certification.run import certify
from raise_eval.certification.settings import CertifySettings
from raise_eval.diagnostics import SandwichNumbers
from raise_eval.evaluation.energy import EnergySettings, evaluate_energy
from raise_eval.evaluation.plan import _start_biases
from raise_eval.evaluation.report import EvaluationReport
from raise_eval.evaluation.run import evaluate
from raise_eval.evaluation.settings import EvaluateSettings, evaluate_settings
from raise_eval.integrations import energy_monitor
from raise_eval.integrations.records import HISTORY_FIELDS, SandwichRecord
from raise_eval.io.datasets import check_binary
from raise_eval.io.outputs import OutputError, check_output_path
from raise_eval.io.results import dump_json, to_jsonable
from raise_eval.io.writing import write_file
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine
from raise_eval.models.contracts import declared_family
from raise_eval.seeds import stage_seed
from raise_eval.settings import SettingsError, setting, settings_class
from raise_eval.trajectory.online import TrajectoryTracker, estimated_log_f, exact_log_f, exact_log_z
from raise_eval.trajectory.report import TRACK_FIELDS, TrajectoryRecord
from raise_eval.trajectory.settings import TrackSettings
from raise_eval.trajectory.verdict import sandwich_verdict

Logger = Callable[[dict[str, float], int], Any]

# The evaluation a monitor runs by default: cheap, for watching a trend (the command's defaults are for final
# numbers). The seed is the same at every call, so differences between epochs are the model's.
MONITOR_EVALUATION = EvaluateSettings(
    init="uniform", steps=100, ais_chains=100, raise_examples=20, raise_chains=5, log_f_method="importance",
    log_f_samples=100,
)  # fmt: skip
MONITOR_FIELDS = (
    "every", "prefix", "history_path", "plot_path", "until_gap", "max_steps", "time_budget", "track", "energy",
)  # fmt: skip


def _output_path(value, field: str) -> Path:
    """A file the monitor rewrites: a regular file or nothing yet, in a folder that exists (`check_output_path`:
    a pipe, a device or a link loop is refused now, not at the first record)."""
    path = Path(value)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{field}: the folder {path.parent} does not exist")
    try:
        if not check_output_path(path, field):
            raise SettingsError(f"{{{field}}} {path} is the null device; leave {{{field}}} out to write nothing")
    except OutputError as e:
        raise SettingsError(str(e), (field,)) from None
    return path


def _history_path(value):
    path = _output_path(value, "history_path")
    if path.suffix.lower() not in (".csv", ".json"):
        raise SettingsError(f"{{history_path}} must end in .csv or .json, got {str(path)!r}", ("history_path",))
    return path


def _plot_path(value):
    path = _output_path(value, "plot_path")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError(
            "plot_path needs matplotlib: pip install -e \".[plot]\" in a clone of raise-eval (or pip install matplotlib)"
        ) from None
    return path


def _track(value):
    if value is True:
        return TrackSettings()
    if value is False:
        return None
    if not isinstance(value, TrackSettings):
        raise SettingsError(f"{{track}} must be a TrackSettings, True or None, got {type(value).__name__}", ("track",))
    return value


def _evaluation(value):
    if not isinstance(value, EvaluateSettings):
        raise SettingsError(f"evaluation must be an EvaluateSettings, got {type(value).__name__}", ("evaluation",))
    return value


@settings_class
class MonitorSettings:
    """A training monitor's settings: when it evaluates, what it writes, and the evaluation it runs (with
    `until_gap`, a certified one: K grows from the evaluation's steps until the sandwich closes within `until_gap`
    nats, or `max_steps` or `time_budget` seconds would be passed)."""

    every: int = setting(1, "evaluate when epoch % every == 0 (epochs count from 0)", kind="count", least=1)
    prefix: str = setting("test_ll/", "the metric names' prefix", kind="text")
    history_path: Optional[Path] = setting(
        None,
        "rewritten after every record: a .csv (one row per record; warning codes joined by ';') or a .json file (a "
        "list of `SandwichRecord.to_dict()` objects); its folder must exist",
        kind="any", none="no history file", check=_history_path,
    )  # fmt: skip
    plot_path: Optional[Path] = setting(
        None, "a PNG of the sandwich against the epoch, redrawn after every record (needs matplotlib)", kind="any",
        none="no plot", check=_plot_path,
    )  # fmt: skip
    until_gap: Optional[float] = setting(
        None, "certify each evaluation to this many nats (`raise_eval.certify`)", kind="number", least=0,
        strictly=True, none="one evaluation at the evaluation's steps",
    )  # fmt: skip
    max_steps: Optional[int] = setting(None, "with until_gap: the largest K", kind="count", least=1, none="no limit")
    time_budget: Optional[float] = setting(
        None, "with until_gap: seconds per certified evaluation", kind="duration", none="no limit",
    )  # fmt: skip
    evaluation: EvaluateSettings = setting(
        MONITOR_EVALUATION, "the settings of each evaluation (cheap defaults: MONITOR_EVALUATION)", kind="any",
        check=_evaluation,
    )  # fmt: skip
    track: Optional[TrackSettings] = setting(
        None,
        "follow log Z along training with persistent chains instead of a full evaluation per call: a TrackSettings "
        "(True: its defaults); the start, RAISE's subset and chains, the exact values and the seed are the "
        "evaluation's",
        kind="any", none="a full evaluation at each call", check=_track,
    )  # fmt: skip
    energy: Optional[EnergySettings] = setting(
        None,
        "evaluate a user's energy model (`EnergyModel`) with these settings (True: the cheap MONITOR_ENERGY); its "
        "test data are its examples, not binary vectors",
        kind="any", none="a Boltzmann machine's or fully visible model's monitor", check=energy_monitor.energy_settings,
    )  # fmt: skip

    def _validate(self) -> None:
        if self.track is not None and self.until_gap is not None:
            raise SettingsError(
                "{until_gap} certifies a full evaluation at each call; {track} follows log Z with persistent chains "
                "and gives its verdict at final() (and every verdict_every records): choose one"
            )
        if self.track is not None and self.energy is not None:
            raise SettingsError("{track} follows RBMs and DBMs; an energy model's monitor ({energy}) evaluates it "
                                "afresh at each call: choose one")  # fmt: skip
        if self.until_gap is None and (self.max_steps is not None or self.time_budget is not None):
            field = "max_steps" if self.max_steps is not None else "time_budget"
            raise SettingsError(f"{{{field}}} bounds a certified evaluation: pass {{until_gap}} too")
        if self.until_gap is not None:
            self.certify_settings  # checked now (e.g. max_steps below steps), not at the first epoch

    @property
    def certify_settings(self) -> Optional[CertifySettings]:
        """The `CertifySettings` of a certified monitor (None: one evaluation per call)."""
        if self.until_gap is None:
            return None
        evaluation = self.evaluation
        if self.energy is not None:  # the shared settings of the first K; the others are `certify_keywords`
            evaluation = EvaluateSettings(**energy_monitor.shared_settings(self.energy))
        return CertifySettings(
            tolerance=self.until_gap, max_steps=self.max_steps, time_budget=self.time_budget, evaluation=evaluation
        )


class LikelihoodMonitor:
    """Evaluate a Boltzmann machine's (or a user's energy model's) test log-likelihood with AIS and RAISE every few
    epochs of training.

    Args:
        test_data: binary test vectors (N, n_visible), or a fully visible model's site states (N, L) (integer codes,
            -1/+1 or 0/1); moved to the model's device and dtype at each evaluation.
        settings: a `MonitorSettings` (when, what is written, and the `EvaluateSettings` of each evaluation);
            keyword `overrides` change its fields (every, prefix, history_path, plot_path, until_gap, max_steps,
            time_budget) or its evaluation's (steps, ais_chains, exact, ...): `LikelihoodMonitor(test, every=5,
            steps=200)`. `exact='auto'` enumerates up to 2^max_exact_units states at every evaluation; pass
            exact='never' when that is too slow to repeat.
        train_pixel_means: for init='base-rates': the training set's pixel means (for a fully visible model, its
            site frequencies (L, q): `raise_eval.visible_statistics(model, train_data)`).
        logger: optional callable logger(metrics, step) receiving {prefix + 'ais', prefix + 'raise',
            prefix + 'gap' and, when known, prefix + 'exact'} as floats, with step = epoch.
        train_data, base, exact_log_z: for an energy model's monitor (`energy=True` or `energy=EnergySettings(...)`,
            whose test data are the model's examples (N, *event_shape)): the training examples the base is fitted
            to at each evaluation, or the base itself (as `evaluate_energy`'s); and `exact_log_z(model) -> float`,
            the model's exact log Z where the user knows it (e.g. a 2-D energy integrated on a grid), for the
            record's exact value (a discrete energy of at most 2^16 configurations is enumerated without it).

    `history` holds the `SandwichRecord`s, `last_report` the latest full `EvaluationReport`, `last_certificate`
    the latest `Certificate` of a certified monitor. The monitor never prints, never touches torch's global random
    state and never changes the model.
    """

    def __init__(
        self,
        test_data: Tensor,
        settings: Optional[MonitorSettings] = None,
        *,
        train_pixel_means: Optional[Tensor] = None,
        logger: Optional[Logger] = None,
        train_data: Optional[Tensor] = None,
        base: Any = None,
        exact_log_z: Optional[Callable[[Any], float]] = None,
        **overrides,
    ):
        own = {k: overrides.pop(k) for k in MONITOR_FIELDS if k in overrides}
        settings = MonitorSettings() if settings is None else settings
        energy = energy_monitor.energy_settings(own.get("energy", settings.energy))
        energy_given = {"train_data": train_data, "base": base, "exact_log_z": exact_log_z}
        energy_monitor.check_energy_keywords(energy, energy_given, overrides)
        if energy is not None and train_pixel_means is not None:
            raise SettingsError("train_pixel_means are a Boltzmann machine's base rates; an energy model's base is "
                                "fitted to train_data (or given as base)")  # fmt: skip
        evaluation = evaluate_settings(settings.evaluation, overrides)
        self.settings = settings.replace(evaluation=evaluation, **own)
        if energy is None and self.settings.evaluation.init == "base-rates" and train_pixel_means is None:
            raise SettingsError("{init} base-rates needs train_pixel_means (the training set's pixel means)")
        if logger is not None and not callable(logger):
            raise TypeError(f"logger must be a callable logger(metrics, step), got {type(logger).__name__}")
        if energy is None:
            self.test_data, self._not_binary = _test_vectors(test_data)
        else:  # an energy model's examples: checked against its support at each evaluation
            self.test_data, self._not_binary = energy_monitor.energy_test_data(test_data), None
        self.energy_inputs = {"train_data": train_data, "base": base}
        self.exact_log_z = exact_log_z
        self.train_pixel_means = train_pixel_means
        self.logger = logger
        self.last_certificate = None
        self.history: list = []  # SandwichRecords, or TrajectoryRecords with `track`
        self.last_report: Optional[EvaluationReport] = None
        self.tracker: Optional[TrajectoryTracker] = None  # with `track`: the persistent chains and every model seen
        self.last_verdict = None  # with `track`: (verdict, interval, reasons, warnings) of the latest verdict
        self._moved: tuple[Any, Tensor] = ((self.test_data.device, self.test_data.dtype), self.test_data)

    @property
    def every(self) -> int:
        return self.settings.every

    @property
    def prefix(self) -> str:
        return self.settings.prefix

    @property
    def history_path(self) -> Optional[Path]:
        return self.settings.history_path

    @property
    def plot_path(self) -> Optional[Path]:
        return self.settings.plot_path

    @property
    def evaluate_kwargs(self) -> dict[str, Any]:
        """What a stand-alone `evaluate(model, test_data, **monitor.evaluate_kwargs)` takes to give this monitor's
        numbers for a model."""
        if self.settings.energy is not None:
            return {"settings": self.settings.energy, **self.energy_inputs}
        return {"settings": self.settings.evaluation, "train_pixel_means": self.train_pixel_means}

    # ------------------------------------------------------------------ scheduling

    def due(self, epoch: int) -> bool:
        """Whether `monitor(epoch, model)` evaluates: epoch % every == 0."""
        return epoch % self.every == 0

    def __call__(self, epoch: int, model) -> Optional[SandwichRecord]:
        """Evaluate `model` (an RBM, DBM or DBN) if `epoch` is due; return the new record, or None when not due."""
        if not self.due(epoch):
            return None
        return self.record(epoch, model)

    def final(self, epoch: int, model, *, emit: bool = True):
        """Evaluate after the last epoch whether or not it is due (the existing record if it was). With `track`, the
        last record also gets RAISE along the trajectory and a verdict (`last_verdict` says why)."""
        if self.settings.track is None:
            if self.history and self.history[-1].epoch == epoch:
                return self.history[-1]
            return self.record(epoch, model, emit=emit)
        last = self.history[-1] if self.history else None
        if last is not None and last.epoch == epoch:
            if last.verdict is not None:
                return last
            self.history.pop()  # this epoch's record again, now with the verdict (the chains are not advanced)
            return self._track(epoch, model, emit=emit, advance=False, verdict=True)
        return self._track(epoch, model, emit=emit, advance=True, verdict=True)

    # ------------------------------------------------------------------ evaluation

    def record(self, epoch: int, model, *, emit: bool = True) -> SandwichRecord:
        """Evaluate `model` now, append the record to `history` and return it. With `emit` (the default) also call
        the logger and rewrite the history and plot files (`SandwichCallback` emits on global rank 0 only)."""
        self._check_model(model)
        if self.settings.track is not None:
            every = self.settings.track.verdict_every
            verdict = every is not None and (len(self.history) + 1) % every == 0
            return self._track(epoch, model, emit=emit, advance=True, verdict=verdict)
        certify_settings = self.settings.certify_settings
        if self.settings.energy is not None:
            return self._record_energy(epoch, model, certify_settings, emit)
        # No autograd graph through parameters that require grad (a Lightning module's); the numbers are the same.
        with torch.no_grad():
            if certify_settings is None:
                report = evaluate(
                    model, self._moved[1], self.settings.evaluation, train_pixel_means=self.train_pixel_means
                )
                verdict = None
            else:
                cert = certify(model, self._moved[1], certify_settings, train_pixel_means=self.train_pixel_means)
                self.last_certificate = cert
                report, verdict = cert.report, cert.verdict
        rec = SandwichRecord.from_report(epoch, report, verdict)
        self.last_report = report
        return self._keep(rec, emit)

    def _keep(self, rec, emit: bool):
        """Append `rec` to the history; with `emit`, rewrite the history and plot files and call the logger."""
        self.history.append(rec)
        if emit:
            self._write_history()
            self._write_plot()
            if self.logger is not None:
                self.logger(self.metrics(rec), rec.epoch)
        return rec

    def _record_energy(self, epoch: int, model, certify_settings, emit: bool) -> SandwichRecord:
        """An energy model's record: `evaluate_energy` (or a certified run) with the monitor's `EnergySettings`, and
        the exact value where known (`energy_monitor.energy_exact`). The kernels differentiate the energy in its
        input (HMC, MALA, Gibbs with gradients), so no torch.no_grad here; the parameters' .grad is not touched."""
        energy, test = self.settings.energy, self._moved[1]
        verdict = None
        if certify_settings is None:
            report = evaluate_energy(model, test, energy, **self.energy_inputs)
        else:
            cert = certify(model, test, certify_settings, **energy_monitor.certify_keywords(energy),
                           **self.energy_inputs)  # fmt: skip
            self.last_certificate = cert
            report, verdict = cert.report, cert.verdict
        exact, log_z_exact = energy_monitor.energy_exact(model, report, self.exact_log_z)
        self.last_report = report
        return self._keep(energy_monitor.energy_record(epoch, report, exact, log_z_exact, verdict), emit)

    def _check_model(self, model) -> None:
        energy = declared_family(model) == "energy"
        if energy != (self.settings.energy is not None):
            if energy:
                raise TypeError(
                    "an energy model (EnergyModel) is evaluated by a monitor made for one: "
                    "LikelihoodMonitor(test_examples, energy=True) (or energy=EnergySettings(...))"
                )
            raise TypeError(f"this monitor was made for an energy model (energy=...), got a {type(model).__name__}")
        if energy:
            dtype = self.test_data.dtype if model.support.discrete else model.dtype  # codes stay integers
            key = (model.device, dtype)
            if self._moved[0] != key:
                self._moved = (key, self.test_data.to(device=model.device, dtype=dtype))
            return
        fully_visible = declared_family(model) == "fully-visible"  # its sites are checked by the evaluation's plan
        if not fully_visible and not isinstance(model, (LayeredBoltzmannMachine, DBN)):
            raise TypeError(
                f"LikelihoodMonitor evaluates an RBM, DBM, DBN or FullyVisibleModel from raise_eval.models, got "
                f"{type(model).__name__}; build one from your parameters, e.g. RBM(W, vbias, hbias) with W shaped "
                "(n_visible, n_hidden)"
            )
        if self.settings.track is not None and (fully_visible or isinstance(model, DBN)):
            raise TypeError("track follows RBMs and DBMs (a DBN's or a fully visible model's trajectory is not a "
                            "Boltzmann machine's of layers)")  # fmt: skip
        if not fully_visible and self._not_binary is not None:
            raise self._not_binary
        key = (model.device, model.dtype)
        if self._moved[0] != key:
            # Cache the moved copy: the model keeps its device and dtype from one epoch to the next.
            self._moved = (key, self.test_data.to(device=model.device, dtype=model.dtype))

    def _track(self, epoch: int, model, *, emit: bool, advance: bool, verdict: bool) -> TrajectoryRecord:
        """Advance the persistent chains to `model` (unless `advance` is False: the record of the model they are at)
        and record log Z; with `verdict`, also RAISE along the trajectory and the verdict."""
        start = time.perf_counter()
        self._check_model(model)
        e, track = self.settings.evaluation, self.settings.track
        with torch.no_grad():
            if self.tracker is None:
                base = _start_biases(model, "RBM" if model.num_layers == 2 else "DBM", e.init, self.train_pixel_means)
                self.tracker = TrajectoryTracker(track, base if e.init == "base-rates" else None, seed=e.seed)
            if advance:
                self.tracker.advance(model)
            model = self.tracker.models[-1]
            test = self._moved[1]
            summary = self.tracker.log_z()
            log_z = float(summary.estimate)
            exact_allowed = e.exact != "never"
            log_f = exact_log_f(model, test, e.max_exact_units if exact_allowed else 0)
            log_f_method = "exact"
            log_z_exact = exact_log_z(model, e.max_exact_units) if exact_allowed else None
            exact = None if log_f is None or log_z_exact is None else float(log_f.mean()) - log_z_exact
            raise_mean = raise_se = gap = outcome = None
            if verdict:
                if log_f is None:
                    generator = torch.Generator(device=model.device).manual_seed(stage_seed(e.seed, "log_f"))
                    log_f = estimated_log_f(model, test, e.log_f_budget("log_f_samples"), generator)
                    log_f_method = "importance"
                subset = _raise_subset(test.shape[0], e.raise_examples, stage_seed(e.seed, "raise_subset"))
                result = self.tracker.raise_(
                    test[subset.to(test.device)], e.raise_chains,
                    torch.Generator(device=model.device).manual_seed(stage_seed(e.seed, "raise")),
                )  # fmt: skip
                cv = result.control_variate_mean(log_f, log_f[subset.to(log_f.device)])
                raise_mean, raise_se = cv.mean, cv.stderr
                ais_mean = float(log_f.mean()) - log_z
                gap = ais_mean - raise_mean
                numbers = SandwichNumbers(
                    ais_mean=ais_mean, ais_stderr=float(summary.stderr), ais_ess=float(summary.ess),
                    ais_chains=track.chains, ais_lower=float(summary.lower), raise_mean=raise_mean,
                    raise_stderr=raise_se, exact_mean=exact, log_z=log_z,
                )  # fmt: skip
                self.last_verdict = sandwich_verdict(
                    numbers, log_f=log_f, test=test, log_f_method=log_f_method, init=e.init,
                    tolerance=track.tolerance, earlier_best=_best_so_far(self.history),
                )  # fmt: skip
                outcome = self.last_verdict[0]
        rec = TrajectoryRecord(
            epoch=int(epoch), log_z=log_z, log_z_stderr=float(summary.stderr), ess=float(summary.ess),
            ais=None if log_f is None else float(log_f.mean()) - log_z, log_z_exact=log_z_exact, exact=exact,
            raise_=raise_mean, raise_se=raise_se, gap=gap, verdict=outcome, seconds=time.perf_counter() - start,
            steps=self.tracker.num_steps,
        )  # fmt: skip
        self.history.append(rec)
        if emit:
            self._write_history()
            self._write_plot()
            if self.logger is not None:
                self.logger(self.metrics(rec), rec.epoch)
        return rec

    def metrics(self, record) -> dict[str, float]:
        """{prefix + 'ais', 'raise', 'gap' and, when known, 'exact'}: what the logger and Lightning receive. With
        `track`: prefix + 'log_z', and 'ais', 'raise', 'gap', 'exact' when the record has them."""
        if isinstance(record, TrajectoryRecord):
            values = {"log_z": record.log_z, "ais": record.ais, "raise": record.raise_, "gap": record.gap,
                      "exact": record.exact}  # fmt: skip
            return {f"{self.prefix}{k}": v for k, v in values.items() if v is not None}
        out = {f"{self.prefix}ais": record.ais, f"{self.prefix}raise": record.raise_, f"{self.prefix}gap": record.gap}
        if record.exact is not None:
            out[f"{self.prefix}exact"] = record.exact
        return out

    # ------------------------------------------------------------------ outputs

    def _write_history(self) -> None:
        path = self.history_path
        if path is None:
            return
        # Whole or not at all (raise_eval.io.writing.write_file): an interrupted or failed write never leaves a
        # truncated history; a failure raises OutputWriteError naming where the history was kept instead.
        fields = HISTORY_FIELDS if self.settings.track is None else TRACK_FIELDS
        if path.suffix.lower() == ".json":
            dump_json([r.to_dict() for r in self.history], str(path))
            return
        text = io.StringIO(newline="")
        writer = csv.writer(text)
        writer.writerow(fields)
        for r in self.history:
            row = to_jsonable(r.to_dict())  # non-finite -> None -> an empty cell, like a missing exact
            if "warnings" in row:
                row["warnings"] = ";".join(row["warnings"])
            writer.writerow(["" if row[k] is None else row[k] for k in fields])
        write_file(path, text.getvalue(), what="the history")

    def _write_plot(self) -> None:
        if self.plot_path is None:
            return
        from raise_eval.render.plots import plot_monitor, plot_track

        s = self.settings.evaluation
        track = self.settings.track
        if self.settings.energy is not None:
            plot_monitor(self.history, str(self.plot_path), energy_monitor.energy_plot_title(self.settings.energy))
            return
        if track is not None:
            title = (
                f"log Z along training: {track.chains} persistent chains, {track.steps} sub-steps per call "
                f"({track.start_steps} to the first model)\n{s.init} start; RAISE {s.raise_examples} x "
                f"{s.raise_chains} at final()"
                + (f" and every {track.verdict_every} records" if track.verdict_every else "")
                + f"; seed {s.seed}"
            )
            plot_track(self.history, str(self.plot_path), title)  # whole or not at all (save_figure)
            return
        title = (
            f"K = {s.steps} ({s.schedule}, {s.init} start), {s.ais_chains} AIS chains, "
            f"RAISE {s.raise_examples} x {s.raise_chains}, seed {s.seed}"
        )
        plot_monitor(self.history, str(self.plot_path), title)


def _test_vectors(test_data) -> tuple[Tensor, Optional[ValueError]]:
    """(The test vectors, the error that says they are not binary or None): integer-valued vectors that are not
    binary may be a fully visible model's site states (codes, -1/+1), checked against its sites at each evaluation;
    anything else is refused now, before training."""
    data = torch.as_tensor(test_data)
    try:
        return check_binary(data, None, "test data"), None
    except ValueError as error:
        integral = data.dim() == 2 and bool(torch.isfinite(data).all()) and bool((data == data.round()).all())
        if not integral:
            if data.is_floating_point() and bool(torch.isfinite(data).all()):
                # Real-valued examples: most likely an energy model's, whose monitor was made without energy=...
                raise type(error)(f"{error} (or, for your own energy-based model, make the monitor with energy=True: "
                                  f"LikelihoodMonitor(test_examples, energy=True))") from None  # fmt: skip
            raise
        return data, error


def _best_so_far(history) -> Optional[float]:
    """The best average test log-likelihood among the tracked records (exact where known, else AIS's), None when none
    has one: what an earlier model on the trajectory scored (`sandwich_verdict`'s `earlier_best`)."""
    scores = [r.exact if r.exact is not None else r.ais for r in history if isinstance(r, TrajectoryRecord)]
    scores = [x for x in scores if x is not None]
    return max(scores) if scores else None


def _raise_subset(n_test: int, examples: int, seed: int) -> Tensor:
    """RAISE's fixed random subset of the monitor's test vectors (all when fewer), sorted."""
    if examples >= n_test:
        return torch.arange(n_test)
    order = torch.randperm(n_test, generator=torch.Generator().manual_seed(seed))
    return order[:examples].sort().values
