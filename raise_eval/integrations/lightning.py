"""A Lightning callback that logs the AIS/RAISE sandwich of the Boltzmann machine being trained.

Optional: needs `lightning` (pip install raise-eval[lightning]), or the older `pytorch_lightning` package. Not
imported by `raise_eval` itself.

    from raise_eval import LikelihoodMonitor
    from raise_eval.integrations.lightning import SandwichCallback

    monitor = LikelihoodMonitor(test_data, every=5, history_path="sandwich.csv")
    trainer = lightning.pytorch.Trainer(callbacks=[SandwichCallback(monitor)], ...)

The callback works in `on_train_epoch_end`: once per training epoch whether or not there is a validation loop,
after the epoch's last update (the point `train_rbm`'s callback sees), with `trainer.current_epoch` the index of
the epoch that just ended (from 0, as for `LikelihoodMonitor`). Lightning never runs that hook while sanity
checking; the callback checks `trainer.sanity_checking` all the same.

A `ModelCheckpoint` or `EarlyStopping` watching these metrics must decide at the end of the training epoch too
(Lightning runs an epoch's validation before this hook, and such callbacks after it). Lightning's defaults do so
when validation runs once per epoch; otherwise pass `save_on_train_epoch_end=True` or
`check_on_train_epoch_end=True`. With `monitor.every > 1` the metrics are logged at the evaluated epochs only, so
use every=1 for such callbacks.

Several processes (DDP): every rank evaluates its own copy of the model (the same parameters and the same seeds, so
the same numbers, at no cost in wall time) and logs without synchronization, so that the metrics exist on every
rank for checkpointing and early stopping, whose decisions must agree across ranks. The monitor's files and its
logger callable are written and called on global rank 0 only; Lightning's loggers also write from rank 0 only.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

try:
    import lightning.pytorch as pl
except ImportError:
    try:
        import pytorch_lightning as pl
    except ImportError:
        raise ImportError(
            "raise_eval.integrations.lightning needs Lightning: pip install raise-eval[lightning] (or pip install "
            "lightning)"
        ) from None

from raise_eval.integrations.hooks import LikelihoodMonitor, SandwichRecord


def _default_model_getter(pl_module: Any):
    try:
        return pl_module.model
    except AttributeError as e:
        raise AttributeError(
            f"SandwichCallback evaluates pl_module.model, but {type(pl_module).__name__} has no attribute 'model' "
            f"({e}); give the LightningModule a `model` attribute or property returning the RBM, DBM or DBN, or pass "
            "SandwichCallback(monitor, model_getter=lambda module: ...)"
        ) from e


class SandwichCallback(pl.Callback):
    """Run a `LikelihoodMonitor` at the end of training epochs and log its metrics with `pl_module.log`.

    Args:
        monitor: decides the epochs (`monitor.every`), the evaluation settings, the metric names (its prefix) and
            the history and plot files; its `history` fills up as training runs.
        model_getter: returns the RBM, DBM or DBN to evaluate from the LightningModule; default
            `pl_module.model`.
        final: also evaluate after the last epoch (the last of `max_epochs`, or when `trainer.should_stop` is
            already set, or `max_steps` is reached) when `monitor.every` would skip it, with `monitor.final`: for a
            tracking monitor (`track`) that record also has RAISE along the trajectory and the verdict.

    Metrics are logged with on_step=False, on_epoch=True (the only form Lightning allows in an epoch-end hook),
    so they reach `trainer.callback_metrics` and every attached logger at that epoch. Lightning keeps logged
    values in float32; `monitor.history` keeps them in float64.
    """

    def __init__(
        self,
        monitor: LikelihoodMonitor,
        model_getter: Optional[Callable[[Any], Any]] = None,
        *,
        final: bool = True,
    ):
        super().__init__()
        if not isinstance(monitor, LikelihoodMonitor):
            raise TypeError(f"monitor must be a raise_eval.LikelihoodMonitor, got {type(monitor).__name__}")
        if model_getter is not None and not callable(model_getter):
            raise TypeError(f"model_getter must be callable, got {type(model_getter).__name__}")
        self.monitor = monitor
        self.model_getter = model_getter or _default_model_getter
        self.final = final

    @staticmethod
    def _last_epoch(trainer: Any) -> bool:
        epoch = trainer.current_epoch
        max_epochs = trainer.max_epochs
        if max_epochs is not None and max_epochs >= 0 and epoch + 1 >= max_epochs:
            return True
        max_steps = trainer.max_steps
        return bool(trainer.should_stop) or (max_steps is not None and 0 <= max_steps <= trainer.global_step)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> Optional[SandwichRecord]:
        if trainer.sanity_checking:
            return None
        epoch = trainer.current_epoch
        if not (self.monitor.due(epoch) or (self.final and self._last_epoch(trainer))):
            return None
        model = self.model_getter(pl_module)
        if self.final and self._last_epoch(trainer):
            # the last epoch: a tracking monitor adds RAISE along the trajectory and its verdict here
            record = self.monitor.final(epoch, model, emit=trainer.is_global_zero)
        else:
            record = self.monitor.record(epoch, model, emit=trainer.is_global_zero)
        for name, value in self.monitor.metrics(record).items():
            # Each rank computed the same value: no sync_dist. batch_size=1: nothing to infer at epoch end.
            pl_module.log(name, value, on_step=False, on_epoch=True, batch_size=1, sync_dist=False)
        return record
