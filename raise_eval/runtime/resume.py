"""Resumable runs: `--resume-file FILE` keeps the finished shards and the annealing state of the shard in progress,
so that the same command continues a run with the numbers of an uninterrupted one.

The file (written with torch.save, read with torch.load(weights_only=True)) is a dict

    format: FORMAT
    settings: what determines the numbers (digests of the model's parameters, the test data, the start
        distribution and the schedule; seed, chain counts, shard size, dtype, device, ...)
    shards: {stage: {shard index: {"log_weights": tensor, ...}}} for the finished AIS and RAISE shards
    log_f: the log f(v) estimates once computed (a dict of LogUnnormalizedEstimate's fields), or absent
    running: the shard in progress, or absent: {stage, shard, phase ('AIS', 'heating' or 'RAISE'; 'log f(v)' for
        the estimates' chunks), step (steps or chunks done), state (the chains' even layers, cached odd-layer inputs
        and carried probabilities; None for the log f(v) chunks), log_weights (for the log f(v) chunks, the
        estimates and standard errors so far, stacked), generator (the generator's state), extra (what the phase
        adds at its end, e.g. RAISE's start weights)}

It is rewritten atomically (`raise_eval.io.writing.write_file`: a temporary file, then os.replace) after every
finished shard and, inside a shard,
every `interval` seconds and at Ctrl-C: while a resume file is in use, Ctrl-C (SIGINT) lets the annealing loop
finish its step, save, and then stop (a second Ctrl-C stops at once). A crash loses the steps since the last save.
Everything a step depends on is in the file (the loop's state carries what one step hands to the next, and the
generator's state is restored), so a continued shard gives the bits of an uninterrupted one. A file written with
other settings is refused, naming each setting that differs and its two values (for the model, the test data, the
start distribution and the schedule, which the file keeps as digests, what differs is said in words). A file whose
shards do not fit the settings it records (another number of chains or vectors than they give, a shard index beyond
the run) or whose log-weights are NaN or infinite (an edited or damaged file) is refused too, naming the shard.

A save that fails while the run goes on (a full disk, an I/O error) does not stop the run: its results are in
memory and are reported as usual, and stopping would throw away the work of the whole run. It is said once, by a
`raise_eval.io.outputs.OutputWarning`; later saves try again, and until one succeeds the file keeps its last complete
save (an interrupted run continues from there). No partial or temporary file is left behind. The null device
(`/dev/null`) as the file keeps nothing: every save is discarded.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from raise_eval.io.outputs import (
    RESUME_FORMAT,
    RESUME_READABLE_FORMATS,
    OutputError,
    OutputWarning,
    OutputWriteError,
    check_output_path,
)
from raise_eval.io.run_files import OutputSettings  # noqa: F401 (declares {resume_file}, which these messages name)
from raise_eval.io.writing import write_file
from raise_eval.runtime import product_routes  # the resumable runs anneal Boltzmann paths
from raise_eval.runtime.interrupts import deferred_interrupts, interrupt_requested  # noqa: F401 (re-exported)
from raise_eval.runtime.sharding import raise_vectors_per_shard, shard_bounds
from raise_eval.settings import Named, SettingsError

FORMAT = RESUME_FORMAT
READABLE_FORMATS = RESUME_READABLE_FORMATS  # format 1 (finished shards only) is format 2 without a shard in progress
DEFAULT_INTERVAL = 60.0  # seconds between saves of the annealing state inside a shard


def tensor_digest(tensors: Iterable[Tensor]) -> str:
    """sha256 (first 16 hex digits) of the tensors' shapes, dtypes and values, in order."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{tuple(t.shape)}:{t.dtype};".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def model_digest(model) -> str:
    """Digest of a Boltzmann machine's or DBN's parameters (weights, biases, recognition biases)."""
    tensors, scale = model.digest_parts()  # `models.contracts.BoltzmannModel` (a DBN's has its recognition biases)
    return f"{tensor_digest(tensors)}/{float(scale)!r}"


def _is_certified_file(path) -> bool:
    """Whether `path` is a certified run's resume file (`certification.loop`'s JSON with its format mark)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and str(doc.get("format", "")).startswith("raise-eval certify")


def rank_resume_file(path, rank: int, world: int) -> str:
    """The file of rank `rank` of `world` processes for --resume-file `path`: '<path>.rank<r>-of-<world>'."""
    return f"{path}.rank{rank}-of-{world}"


def check_world_size(path, world: int) -> None:
    """Refuse (ValueError) a resume file written by another number of processes: one process writes `path`
    itself, N > 1 processes `path.rank<r>-of-<N>`. Shards are dealt out by rank, so the files of one world size
    cannot continue under another."""
    path = Path(path)
    own = {path.name} if world == 1 else {Path(rank_resume_file(path, r, world)).name for r in range(world)}
    others = sorted(
        p.name
        for p in [path, *path.parent.glob(f"{glob_escape(path.name)}.rank*-of-*")]
        if p.exists() and p.name not in own
    )
    if others:
        raise SettingsError(
            f"{{resume_file}} {path} was written by another number of processes ({', '.join(others)} exist; this run "
            f"has {world}): continue it with that many processes, or delete those files to start over"
        )


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


class ResumeFile:
    """The finished shards of one run, kept in `path` (see the module docstring).

    Opening refuses (ValueError) a file written with other settings; a missing file starts an empty run.
    """

    def __init__(
        self,
        path,
        settings: dict[str, Any],
        interval: float = DEFAULT_INTERVAL,
        context: Optional[dict] = None,
        older_settings: Optional[Callable[[dict], dict]] = None,
    ):
        """`older_settings(old)`: the values of settings added since a file was written, as the run that wrote it
        ran (e.g. the eager loop before step programs existed), for a file that lacks them."""
        if not interval >= 0:
            raise SettingsError(f"the resume interval must be a number of seconds >= 0, got {interval!r}")
        self.path = Path(path)
        # Refused before anything reads it: a named pipe would block the read below, a device or a folder would be
        # replaced by the first save. The null device keeps nothing.
        try:
            self.discard = not check_output_path(self.path, "{resume_file}")
        except OutputError as e:
            raise SettingsError(str(e), ("resume_file",)) from None
        self.interval = float(interval)
        self.settings = dict(settings)
        self.context = dict(context or {})  # e.g. threads and torch version: reported when they change
        self.context_changes: list[str] = []
        self.continued: list[str] = []  # what this run took from the file, for the report's notes
        self.save_error: Optional[str] = None  # why the latest save failed; None when it succeeded
        self._warned = False
        self.data: dict[str, Any] = {
            "format": FORMAT,
            "settings": self.settings,
            "context": self.context,
            "shards": {},
        }
        if self.path.exists() and not self.discard:
            try:
                loaded = torch.load(str(self.path), map_location="cpu", weights_only=True)
            except Exception as e:  # noqa: BLE001 - any unreadable file gets the same advice
                if _is_certified_file(self.path):
                    raise SettingsError(
                        f"{{resume_file}} {self.path} is a certified run's resume file (--until-gap, or "
                        "raise_eval.certify): continue it that way, or name another file for this run"
                    ) from None
                raise SettingsError(
                    f"{{resume_file}} {self.path} is not a raise-eval resume file ({type(e).__name__}); "
                    "delete it or name another file"
                ) from None
            if not isinstance(loaded, dict) or loaded.get("format") not in READABLE_FORMATS:
                raise SettingsError(
                    f"{{resume_file}} {self.path} is not a raise-eval resume file of format {FORMAT}; delete it or "
                    "name another file"
                )
            old = loaded.get("settings", {})
            if older_settings is not None:
                old = {**older_settings(old), **old}
            differ = [
                _difference(k, old.get(k), self.settings.get(k))
                for k in sorted(set(old) | set(self.settings))
                if old.get(k) != self.settings.get(k)
            ]
            if differ:
                raise SettingsError(
                    f"{{resume_file}} {self.path} was written by a run with other settings ("
                    + "; ".join(differ)
                    + "); run with the same settings to continue it, or delete it or name another file to start over"
                )
            problems = _content_problems(loaded, self.settings)
            if problems:
                raise SettingsError(
                    f"{{resume_file}} {self.path} does not hold what the run that wrote it saves ("
                    + "; ".join(problems[:3])
                    + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
                    + "): it was edited or damaged; delete it to start over"
                )
            self.data = {**loaded, "format": FORMAT}
            context = loaded.get("context", {})
            # Not refused, since they need not change the numbers; but bit-identity was tested with them equal.
            self.context_changes = [
                f"{k} {context[k]} when the file was written, {v} now"
                for k, v in self.context.items()
                if k in context and context[k] != v
            ]
            self.data["context"] = self.context

    def shards(self, stage: str) -> dict[int, dict]:
        """The finished shards of `stage` ('ais', 'raise'): {index: result}."""
        return self.data["shards"].get(stage, {})

    def note_read_back(self, stage: str, count: int, total: int) -> None:
        """Record that `count` of `total` finished shards of `stage` were taken from the file."""
        if count:
            self.continued.append(f"{count} of {total} {stage} shards read back")

    def save_shard(self, stage: str, index: int, result: dict) -> None:
        self.data["shards"].setdefault(stage, {})[int(index)] = _cpu(result)
        running = self.data.get("running")
        if running is not None and running["stage"] == stage and running["shard"] == int(index):
            del self.data["running"]  # finished: its annealing state is no longer needed
        self.write()

    def checkpoint(self, stage: str, index: int, generator: torch.Generator) -> ShardCheckpoint:
        """The saver and restorer of shard `index` of `stage`'s annealing state (see ShardCheckpoint)."""
        return ShardCheckpoint(self, stage, index, generator)

    def check_schedule(self, betas: Tensor) -> None:
        """Keep the digest of the betas an adaptive pilot chose, or refuse (ValueError) betas other than the kept
        ones: a restored step must continue on the schedule it was saved on."""
        digest = tensor_digest([betas])
        kept = self.data.get("schedule_digest")
        if kept is None:
            self.put("schedule_digest", digest)
        elif kept != digest:
            raise SettingsError(
                f"the adaptive pilot chose other betas than the run in {{resume_file}} {self.path} (digest {digest}, "
                f"the file's {kept}): its numbers depend on the thread count and torch version, which have changed ("
                + ("; ".join(self.context_changes) or "see the file's settings")
                + "); run with the file's {threads}, or delete the file to start over"
            )

    def get(self, key: str):
        return self.data.get(key)

    def put(self, key: str, value) -> None:
        self.data[key] = _cpu(value)
        self.write()

    def write(self, running: Optional[dict] = None) -> None:
        """Atomically replace the file (a reader, or a crash, never sees half a file), with the annealing state of
        the shard in progress when given. A failed save does not stop the run: it is warned of once
        (OutputWarning), `save_error` says why, and the next save tries again (see the module docstring)."""
        if self.discard:
            return
        # The product routes chosen so far (by timing, once per shape): a continued run adopts them.
        self.data["product_routes"] = [c.as_dict() for c in product_routes.route_choices()]
        payload = self.data if running is None else {**self.data, "running": running}
        try:
            write_file(self.path, lambda p: torch.save(payload, p), what="the resume state", keep_on_failure=False)
        except (OutputError, OutputWriteError) as e:
            self.save_error = str(e)
            if not self._warned:
                self._warned = True
                kept = (
                    f"{self.path} keeps the run's last complete save, from which an interrupted run continues"
                    if self.path.exists()
                    else f"nothing is saved in {self.path} yet: an interrupted run would start over"
                )
                warnings.warn(
                    Named(
                        f"{{resume_file}}: {e}. The run goes on (its results are unaffected) and later saves try "
                        f"again; until one succeeds, {kept}"
                    ),
                    OutputWarning,
                    stacklevel=2,
                )
            return
        self.save_error = None


_DIGESTS = {
    "parameters": "the model's parameters differ (another checkpoint, or other weights of the same shapes)",
    "test_data": "the test vectors differ (another {data}, {split}, {pixel_order} or {test_subset}, or changed data)",
    "start_biases": "the start distribution differs (another {init}, {train_data} or training-set base rates)",
    "schedule_betas": "the explicit schedule's betas differ",
    "base": "the base differs (other training data, or another base)",
    "energy": "the energy differs (another function or model file: its values at fixed probe points differ)",
}


def _difference(key: str, old, new) -> str:
    """One setting that differs between a resume file and this run, in words: the digests as what they stand for."""
    if key in _DIGESTS and old is not None and new is not None:
        return _DIGESTS[key]
    return f"{key}: {old!r} in the file, {new!r} now"


def _content_problems(loaded: dict, settings: dict) -> list[str]:
    """What in a resume file with matching settings the run that wrote it could not have saved: shards of another
    size than the settings give, shard indices beyond the run, NaN or infinite log-weights."""
    problems: list[str] = []
    expected: dict[str, dict[int, tuple]] = {}
    ints = [settings.get(k) for k in ("ais_chains", "shard_size", "raise_examples", "raise_chains")]
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in ints):
        ais_chains, shard_size, raise_examples, raise_chains = ints
        expected["ais"] = {i: (b - a,) for i, (a, b) in enumerate(shard_bounds(ais_chains, shard_size))}
        per_shard = raise_vectors_per_shard(shard_size, raise_chains)
        expected["raise"] = {
            i: (b - a, raise_chains) for i, (a, b) in enumerate(shard_bounds(raise_examples, per_shard))
        }
    shards = loaded.get("shards", {})
    if not isinstance(shards, dict):
        return [f"'shards' is a {type(shards).__name__}, not a dict"]
    for stage, records in shards.items():
        if stage not in ("ais", "raise") or not isinstance(records, dict):
            problems.append(f"an unknown stage {stage!r}")
            continue
        for index, record in records.items():
            name = f"{stage.upper()} shard {index}"
            log_w = record.get("log_weights") if isinstance(record, dict) else None
            if not isinstance(log_w, Tensor) or not log_w.is_floating_point():
                problems.append(f"{name} has no log-weights")
                continue
            shape = expected.get(stage, {}).get(index) if expected else tuple(log_w.shape)
            if shape is None:
                count = len(expected[stage])
                shards_word = "shard" if count == 1 else "shards"
                problems.append(f"{name} is beyond the run, which has {count} {stage.upper()} {shards_word}")
            elif tuple(log_w.shape) != shape:
                what = f"{shape[0]:,} chains" if stage == "ais" else f"{shape[0]:,} vectors x {shape[1]:,} chains"
                problems.append(f"{name} holds log-weights shaped {tuple(log_w.shape)}; the run's settings give {what}")
            bad = int((~torch.isfinite(log_w)).sum())
            if bad:
                problems.append(f"{name} has {bad:,} NaN or infinite log-weight{'s' * (bad != 1)}")
            log_f = record.get("log_unnormalized")
            if isinstance(log_f, Tensor) and log_f.is_floating_point() and not bool(torch.isfinite(log_f).all()):
                problems.append(f"{name} has NaN or infinite log f(v) values")
    running = loaded.get("running")
    if isinstance(running, dict) and isinstance(running.get("log_weights"), Tensor):
        if bool(torch.isnan(running["log_weights"]).any()):
            problems.append(f"the {running.get('stage')} shard in progress has NaN log-weights")
    log_f = loaded.get("log_f")
    values = log_f.get("log_unnormalized") if isinstance(log_f, dict) else None
    if isinstance(values, Tensor) and values.is_floating_point() and not bool(torch.isfinite(values).all()):
        problems.append("the saved log f(v) estimates have NaN or infinite values")
    elif isinstance(values, float) and not math.isfinite(values):
        problems.append("the saved log f(v) estimates have NaN or infinite values")
    return problems


class ShardCheckpoint:
    """Saves the annealing state of one shard to its ResumeFile and restores it: what the estimators (`ais`,
    `raise_log_likelihood`) take as `checkpoint`.

    An estimator asks `restore(phase, path)` before a phase ('AIS'; 'heating', 'RAISE') and skips what precedes the
    saved step; it passes `on_step(phase, extra)` to `anneal`, which saves every `interval` seconds of the file and
    when Ctrl-C was pressed (then raises KeyboardInterrupt after saving).
    """

    def __init__(self, store: ResumeFile, stage: str, index: int, generator: torch.Generator):
        self.store, self.stage, self.index, self.generator = store, stage, int(index), generator
        self._last_save = time.monotonic()

    def restore(self, phase: str, path) -> Optional[dict[str, Any]]:
        """The saved state of `phase` of this shard, or None: {step, state (on the generator's device, its carried
        probabilities keyed for `path`; None for a stage without chains, e.g. the log f(v) chunks), log_weights,
        extra}. Restores the generator's state too."""
        rec = self.store.data.get("running")
        if rec is None or (rec["stage"], rec["shard"], rec["phase"]) != (self.stage, self.index, phase):
            return None
        device = self.generator.device

        def to(xs):
            return None if xs is None else tuple(None if x is None else x.to(device) for x in xs)

        del self.store.data["running"]  # handed over: the loop changes these tensors from now on
        saved, state = rec["state"], None
        if saved is not None:  # the path rebuilds its own state (`contracts.ResumableState`)
            record = {key: to(saved[key]) for key in ("layers", "odd_inputs", "odd_probs")}
            state = path.state_from_record({**record, "probs_beta": saved["probs_beta"]})
        self.generator.set_state(rec["generator"])
        unit = "step" if state is not None else "chunk"
        self.store.continued.append(f"{self.stage} shard {self.index} continued from {unit} {rec['step']} ({phase})")
        extra = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in rec["extra"].items()}
        return {"step": rec["step"], "state": state, "log_weights": rec["log_weights"].to(device), "extra": extra}

    def on_step(self, phase: str, extra: Optional[dict] = None):
        """The `anneal` callback of `phase`: saves (step, state, log-weights, generator, extra) when due. The
        log-weights may be given as a function that builds them, called only when a save is due."""

        def save_if_due(step: int, state, log_weights) -> None:
            stop = interrupt_requested()
            if not stop and time.monotonic() - self._last_save < self.store.interval:
                return
            if callable(log_weights):  # built only when a save is due
                log_weights = log_weights()
            record = _cpu(
                {
                    "stage": self.stage,
                    "shard": self.index,
                    "phase": phase,
                    "step": int(step),
                    "state": None if state is None else _state_record(state),
                    "log_weights": log_weights,
                    "generator": self.generator.get_state(),
                    "extra": dict(extra or {}),
                }
            )
            # Written, not kept: the record's tensors are the loop's own, which the next step overwrites.
            self.store.data.pop("running", None)
            self.store.write(running=record)
            self._last_save = time.monotonic()
            if stop:
                raise KeyboardInterrupt

        return save_if_due


def _state_record(state) -> dict[str, Any]:
    """What a resume file keeps of a chain state: a `ChainState`'s layers, odd inputs and odd probabilities (with
    the beta they hold), or the one tensor that is the whole state of a path with no hidden units (a fully visible
    model's site codes), kept as its only layer, or a named tuple of tensors (an energy model's `EnergyState`: x,
    log f and its gradient or None), kept as its layers in order."""
    if isinstance(state, Tensor):
        return {"layers": [state], "odd_inputs": [], "odd_probs": None, "probs_beta": None}
    if not hasattr(state, "probs_key"):  # not a `ChainState`: a named tuple of tensors (an energy's EnergyState)
        return {"layers": list(state), "odd_inputs": [], "odd_probs": None, "probs_beta": None}
    key = state.probs_key
    return {
        "layers": list(state.layers),
        "odd_inputs": list(state.odd_inputs),
        "odd_probs": None if key is None else list(state.odd_probs),
        "probs_beta": None if key is None else float(key[1]),
    }


def _cpu(obj):
    if isinstance(obj, Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_cpu(v) for v in obj]
    return obj
