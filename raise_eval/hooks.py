"""Log the AIS/RAISE sandwich of a Boltzmann machine while it trains.

`LikelihoodMonitor` is a callable `monitor(epoch, model)` for a plain PyTorch training loop (it is the `callback`
of `raise_eval.models.training.rbm.train_rbm` as it stands). Every `every` epochs it runs
`raise_eval.evaluate.evaluate` on the test set with the same seed each time, so every logged number is exactly
what a stand-alone `evaluate(model, test_data, **monitor.evaluate_kwargs)` of that epoch's model gives, and
records a `SandwichRecord` (AIS, RAISE, their gap, the exact value when the model is small enough). Optionally it
hands the numbers to a logger callable (TensorBoard, wandb, ...), rewrites a CSV or JSON history and redraws a PNG
of the sandwich after each record. For Lightning, `raise_eval.lightning.SandwichCallback` wraps a monitor.

Epochs count from 0, as `train_rbm` passes them (and as Lightning's `trainer.current_epoch` does in an epoch-end
hook): epoch e is the state after e + 1 passes over the data. With `every=k` the monitor evaluates after epochs
0, k, 2k, ..., so the first epoch always gives a point; `monitor.final(epoch, model)` adds the last one.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor

from raise_eval import exact as exact_mod
from raise_eval.datasets import check_binary
from raise_eval.diagnostics import GAP_NATS
from raise_eval.certify import certify
from raise_eval.evaluate import EvaluationReport, check_settings, evaluate
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine
from raise_eval.outputs import save_figure, write_file
from raise_eval.results import dump_json, to_jsonable
from raise_eval.schedules import make_schedule

Logger = Callable[[dict[str, float], int], Any]

HISTORY_FIELDS = (
    "epoch",
    "ais",
    "ais_se",
    "raise",
    "raise_se",
    "gap",
    "exact",
    "log_z",
    "log_z_exact",
    "seconds",
    "warnings",
    "verdict",
)


@dataclass(frozen=True)
class SandwichRecord:
    """One evaluation during training: average test log-likelihoods in nats.

    ais, ais_se: AIS's estimate (optimistic) and its standard error (that of log Z-hat, as the report prints it);
    raise_, raise_se: RAISE's control-variate headline (conservative) and its standard error; gap = ais - raise_;
    exact: the exact average when enumeration was affordable (`exact='auto'`), else None; log_z: AIS's log Z-hat
    (for a DBN, the top RBM's), log_z_exact the exact one or None; seconds: wall time of the evaluation;
    warnings: the codes of the report's warnings (README, "How to read the numbers"); verdict: with a certified
    monitor (`until_gap`), 'closed' or 'open' (`LikelihoodMonitor.last_certificate` says why), else None.
    """

    epoch: int
    ais: float
    ais_se: float
    raise_: float
    raise_se: float
    gap: float
    exact: Optional[float]
    log_z: float
    log_z_exact: Optional[float]
    seconds: float
    warnings: tuple[str, ...] = ()
    verdict: Optional[str] = None

    @classmethod
    def from_report(cls, epoch: int, report: EvaluationReport, verdict: Optional[str] = None) -> SandwichRecord:
        return cls(
            epoch=int(epoch),
            ais=float(report.ais_mean),
            ais_se=float(report.ais.stderr),
            raise_=float(report.raise_mean),
            raise_se=float(report.raise_stderr),
            gap=float(report.gap),
            exact=report.exact_mean,
            log_z=float(report.ais.estimate),
            log_z_exact=report.log_z_exact,
            seconds=float(report.timing["seconds"]),
            warnings=tuple(w.code for w in report.warnings),
            verdict=verdict,
        )

    def to_dict(self) -> dict[str, Any]:
        """The record with the key 'raise' (not 'raise_'), in the order of the history files' columns."""
        values = (
            self.epoch,
            self.ais,
            self.ais_se,
            self.raise_,
            self.raise_se,
            self.gap,
            self.exact,
            self.log_z,
            self.log_z_exact,
            self.seconds,
            list(self.warnings),
            self.verdict,
        )
        return dict(zip(HISTORY_FIELDS, values))


class LikelihoodMonitor:
    """Evaluate a Boltzmann machine's test log-likelihood with AIS and RAISE every few epochs of training.

    Args:
        test_data: binary test vectors (N, n_visible); moved to the model's device and dtype at each evaluation.
        every: evaluate when `epoch % every == 0` (epochs count from 0: see the module docstring).
        init, train_pixel_means, schedule, steps, ais_chains, raise_examples, raise_chains, seed, exact,
            max_exact_units, log_f_method, log_f_samples, cv_alpha: passed to `raise_eval.evaluate.evaluate`
            unchanged at every evaluation (the defaults are cheap, for monitoring; compare final models with the
            command's defaults). The seed is the same every time: differences between epochs are the model's,
            not the random numbers'. `exact='auto'` enumerates up to 2^max_exact_units states at every
            evaluation; pass exact='never' when that is too slow to repeat.
        logger: optional callable logger(metrics, step) receiving {prefix + 'ais', prefix + 'raise',
            prefix + 'gap' and, when known, prefix + 'exact'} as floats, with step = epoch.
        prefix: the metric names' prefix.
        history_path: rewritten after every record: a .csv (one row per record; warning codes joined by ';') or a
            .json file (a list of `SandwichRecord.to_dict()` objects); its folder must exist.
        plot_path: a PNG of the sandwich against the epoch, redrawn after every record (needs matplotlib, the
            "plot" extra).
        progress: tqdm progress bars during each evaluation.
        until_gap, max_steps, time_budget: certify each evaluation (`raise_eval.certify`): K grows from `steps` until
            the sandwich closes within `until_gap` nats, or `max_steps` or `time_budget` seconds would be passed;
            the record's verdict says which, `last_certificate` why. None (the default): one evaluation at `steps`.

    `history` holds the `SandwichRecord`s, `last_report` the latest full `EvaluationReport`. The monitor never
    prints, never touches torch's global random state and never changes the model.
    """

    def __init__(
        self,
        test_data: Tensor,
        *,
        every: int = 1,
        init: str = "uniform",
        train_pixel_means: Optional[Tensor] = None,
        schedule: str = "linear",
        steps: int = 100,
        ais_chains: int = 100,
        raise_examples: int = 20,
        raise_chains: int = 5,
        seed: int = 0,
        exact: str = "auto",
        max_exact_units: int = exact_mod.DEFAULT_MAX_UNITS,
        log_f_method: str = "importance",
        log_f_samples: int = 100,
        cv_alpha: Union[float, str] = 1.0,
        logger: Optional[Logger] = None,
        prefix: str = "test_ll/",
        history_path: Optional[Union[str, os.PathLike]] = None,
        plot_path: Optional[Union[str, os.PathLike]] = None,
        progress: bool = False,
        until_gap: Optional[float] = None,
        max_steps: Optional[int] = None,
        time_budget: Optional[float] = None,
    ):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive integer (evaluate when epoch % every == 0), got {every!r}")
        # Check everything evaluate would check now, so that a typo fails before training rather than after
        # its first epoch.
        if init == "base-rates" and train_pixel_means is None:
            raise ValueError("init='base-rates' needs train_pixel_means (the training set's pixel means)")
        check_settings(
            init=init,
            exact=exact,
            log_f_method=log_f_method,
            ais_chains=ais_chains,
            raise_examples=raise_examples,
            raise_chains=raise_chains,
            log_f_samples=log_f_samples,
            cv_alpha=cv_alpha,
        )
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be an integer of at least 1, got {steps!r}")
        make_schedule(schedule, steps)  # raises on an unknown schedule
        if logger is not None and not callable(logger):
            raise TypeError(f"logger must be a callable logger(metrics, step), got {type(logger).__name__}")
        self.test_data = check_binary(torch.as_tensor(test_data), None, "test data")
        self.every = every
        self.prefix = prefix
        self.logger = logger
        self.history_path = None if history_path is None else Path(history_path)
        self.plot_path = None if plot_path is None else Path(plot_path)
        for what, path in (("history_path", self.history_path), ("plot_path", self.plot_path)):
            if path is not None and not path.parent.is_dir():
                raise FileNotFoundError(f"{what}: the folder {path.parent} does not exist")
        if self.history_path is not None and self.history_path.suffix.lower() not in (".csv", ".json"):
            raise ValueError(f"history_path must end in .csv or .json, got {str(self.history_path)!r}")
        if self.plot_path is not None:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                raise ImportError(
                    "plot_path needs matplotlib: pip install raise-eval[plot] (or pip install matplotlib)"
                ) from None
        self.evaluate_kwargs: dict[str, Any] = dict(
            init=init,
            train_pixel_means=train_pixel_means,
            schedule=schedule,
            steps=steps,
            ais_chains=ais_chains,
            raise_examples=raise_examples,
            raise_chains=raise_chains,
            seed=seed,
            exact=exact,
            max_exact_units=max_exact_units,
            log_f_method=log_f_method,
            log_f_samples=log_f_samples,
            cv_alpha=cv_alpha,
        )
        if until_gap is not None and not (
            isinstance(until_gap, (int, float)) and not isinstance(until_gap, bool) and math.isfinite(until_gap)
            and until_gap > 0
        ):
            raise ValueError(f"until_gap must be a positive finite number of nats, got {until_gap!r}")
        if time_budget is not None and not (
            isinstance(time_budget, (int, float)) and not isinstance(time_budget, bool) and math.isfinite(time_budget)
            and time_budget > 0
        ):
            raise ValueError(
                f"time_budget must be a positive number of seconds, got {time_budget!r} "
                "(raise_eval.certify.parse_duration('30m') converts a duration)"
            )
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < steps):
            raise ValueError(f"max_steps must be an integer of at least steps ({steps}), got {max_steps!r}")
        if until_gap is None and (max_steps is not None or time_budget is not None):
            raise ValueError("max_steps and time_budget bound a certified evaluation: pass until_gap too")
        self.certify_kwargs = (
            None if until_gap is None else dict(tolerance=until_gap, max_steps=max_steps, time_budget=time_budget)
        )
        self.last_certificate = None
        self.progress = progress
        self.history: list[SandwichRecord] = []
        self.last_report: Optional[EvaluationReport] = None
        self._moved: tuple[Any, Tensor] = ((self.test_data.device, self.test_data.dtype), self.test_data)

    # ------------------------------------------------------------------ scheduling

    def due(self, epoch: int) -> bool:
        """Whether `monitor(epoch, model)` evaluates: epoch % every == 0."""
        return epoch % self.every == 0

    def __call__(self, epoch: int, model) -> Optional[SandwichRecord]:
        """Evaluate `model` (an RBM, DBM or DBN) if `epoch` is due; return the new record, or None when not due."""
        if not self.due(epoch):
            return None
        return self.record(epoch, model)

    def final(self, epoch: int, model) -> SandwichRecord:
        """Evaluate after the last epoch whether or not it is due (the existing record if it was)."""
        if self.history and self.history[-1].epoch == epoch:
            return self.history[-1]
        return self.record(epoch, model)

    # ------------------------------------------------------------------ evaluation

    def record(self, epoch: int, model, *, emit: bool = True) -> SandwichRecord:
        """Evaluate `model` now, append the record to `history` and return it. With `emit` (the default) also call
        the logger and rewrite the history and plot files (`SandwichCallback` emits on global rank 0 only)."""
        if not isinstance(model, (LayeredBoltzmannMachine, DBN)):
            raise TypeError(
                f"LikelihoodMonitor evaluates an RBM, DBM or DBN from raise_eval.models, got {type(model).__name__}; "
                "build one from your parameters, e.g. RBM(W, vbias, hbias) with W shaped (n_visible, n_hidden)"
            )
        key = (model.device, model.dtype)
        if self._moved[0] != key:
            # Cache the moved copy: the model keeps its device and dtype from one epoch to the next.
            self._moved = (key, self.test_data.to(device=model.device, dtype=model.dtype))
        # No autograd graph through parameters that require grad (a Lightning module's); the numbers are the same.
        with torch.no_grad():
            if self.certify_kwargs is None:
                report = evaluate(model, self._moved[1], progress=self.progress, **self.evaluate_kwargs)
                verdict = None
            else:
                cert = certify(model, self._moved[1], progress=self.progress, **self.certify_kwargs, **self.evaluate_kwargs)
                self.last_certificate = cert
                report, verdict = cert.report, cert.verdict
        rec = SandwichRecord.from_report(epoch, report, verdict)
        self.history.append(rec)
        self.last_report = report
        if emit:
            self._write_history()
            self._write_plot()
            if self.logger is not None:
                self.logger(self.metrics(rec), rec.epoch)
        return rec

    def metrics(self, record: SandwichRecord) -> dict[str, float]:
        """{prefix + 'ais', 'raise', 'gap' and, when known, 'exact'}: what the logger and Lightning receive."""
        out = {f"{self.prefix}ais": record.ais, f"{self.prefix}raise": record.raise_, f"{self.prefix}gap": record.gap}
        if record.exact is not None:
            out[f"{self.prefix}exact"] = record.exact
        return out

    # ------------------------------------------------------------------ outputs

    def _write_history(self) -> None:
        path = self.history_path
        if path is None:
            return
        # Whole or not at all (raise_eval.outputs.write_file): an interrupted or failed write never leaves a
        # truncated history; a failure raises OutputWriteError naming where the history was kept instead.
        if path.suffix.lower() == ".json":
            dump_json([r.to_dict() for r in self.history], str(path))
            return
        text = io.StringIO(newline="")
        writer = csv.writer(text)
        writer.writerow(HISTORY_FIELDS)
        for r in self.history:
            row = to_jsonable(r.to_dict())  # non-finite -> None -> an empty cell, like a missing exact
            row["warnings"] = ";".join(row["warnings"])
            writer.writerow(["" if row[k] is None else row[k] for k in HISTORY_FIELDS])
        write_file(path, text.getvalue(), what="the history")

    def _write_plot(self) -> None:
        if self.plot_path is None:
            return
        # Figure + the Agg canvas, not pyplot: no global backend switch in the caller's process, no open windows.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        h = self.history
        epochs = [r.epoch for r in h]
        fig = Figure(figsize=(7, 6))
        FigureCanvasAgg(fig)
        top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1.2]})
        for name, mean, se, style, color in (
            ("AIS (optimistic)", [r.ais for r in h], [r.ais_se for r in h], "o-", "C0"),
            ("RAISE (conservative)", [r.raise_ for r in h], [r.raise_se for r in h], "s-", "C1"),
        ):
            top.plot(epochs, mean, style, color=color, label=f"{name} ± s.e.", markersize=4)
            lo = [m - s for m, s in zip(mean, se)]
            hi = [m + s for m, s in zip(mean, se)]
            top.fill_between(epochs, lo, hi, color=color, alpha=0.25, linewidth=0)
        known = [r for r in h if r.exact is not None]
        if known:
            top.plot([r.epoch for r in known], [r.exact for r in known], "x--", color="black", label="exact")
        top.set_ylabel("average test log-likelihood (nats)")
        kw = self.evaluate_kwargs
        top.set_title(
            f"K = {kw['steps']} ({kw['schedule']}, {kw['init']} start), {kw['ais_chains']} AIS chains, "
            f"RAISE {kw['raise_examples']} x {kw['raise_chains']}, seed {kw['seed']}",
            fontsize=9,
        )
        top.legend(fontsize=8)
        top.grid(alpha=0.3)
        bottom.plot(epochs, [r.gap for r in h], "o-", color="C2", markersize=4, label="gap (AIS - RAISE)")
        bottom.axhline(0.0, color="grey", linewidth=0.8)
        if max(r.gap for r in h) >= GAP_NATS / 2:
            # Only when it is near: the threshold line would otherwise flatten small gaps into the zero line.
            bottom.axhline(GAP_NATS, color="C3", linestyle=":", label=f"{GAP_NATS:g} nat: large-gap warning")
        bottom.annotate(
            f"{h[-1].gap:.3f}", (epochs[-1], h[-1].gap), textcoords="offset points", xytext=(-4, 6), ha="right"
        )
        bottom.set_ylabel("gap (nats)")
        bottom.set_xlabel("epoch (from 0)")
        bottom.legend(fontsize=8)
        bottom.grid(alpha=0.3)
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.tight_layout()
        save_figure(fig, self.plot_path, dpi=100)  # whole or not at all
