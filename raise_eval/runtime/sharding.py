"""Paper-scale runs in bounded memory: AIS chains and RAISE test vectors split into fixed shards.

A shard is a fixed piece of a stage's work with its own random stream:

- AIS: chains [i s, (i + 1) s) for a shard size of s chains;
- RAISE: the test subset's vectors [i n, (i + 1) n), n = max(1, s // C) whole vectors, all C chains of a vector
  in one shard.

The shard size s is a setting (`shard_size`; default `default_shard_size(model)`, a function of the layer sizes
only, large enough that today's default runs are one shard per stage). Shard i of a stage draws from a generator
seeded with `shard_seed(seed, stage, i)`: shard 0 keeps the stage's historical seed (seed for AIS, seed + 1 for
RAISE), so a one-shard stage gives the numbers it always gave; shard i > 0 gets the first 63 bits of
sha256("raise-eval/<stage>/<seed>/<i>"). Neither the memory bound nor the number of processes enters the streams
or the shard boundaries, so the results are bit-identical however the shards are run: one at a time within
`--max-memory`, across torch.distributed ranks (shard i on rank i % world_size), or resumed from a file.

Results are assembled from the per-shard log-weights in shard order, so their summaries do not depend on how the
shards were run.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from typing import Any, Callable, Optional

import torch
from torch import Tensor
from tqdm.auto import tqdm

from raise_eval.estimators.ais import AISResult, ais
from raise_eval.estimators.raise_ import RAISEResult, raise_log_likelihood
from raise_eval.runtime import distributed
from raise_eval.runtime.interrupts import deferred_interrupts, interrupt_requested
from raise_eval.seeds import EVALUATION_OFFSETS as STAGE_OFFSETS  # noqa: F401 - the old name
from raise_eval.seeds import stage_seed

SHARD_UNITS = 2**23  # units (chains x layer sizes) per default shard: about 270 MB of float32 states and buffers


def default_max_memory(device: torch.device) -> int:
    """Half of the memory free now: MemAvailable of /proc/meminfo on the CPU, torch.cuda.mem_get_info on CUDA."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0]) // 2
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except (OSError, ValueError, IndexError):
        pass
    return 2 * 10**9  # no /proc/meminfo (not Linux): a bound most machines can take


def chain_units(model) -> int:
    """Entries of one annealing chain's state, by the family the model declares: the sum of a Boltzmann machine's
    layer sizes; L q for a fully visible model (the one-hot rows and coupling inputs its log-density is computed
    from)."""
    if model.family == "fully-visible":
        return model.n_visible * model.num_states
    return sum(model.layer_sizes)


def default_shard_size(model) -> int:
    """Chains per shard: as many as keep chains x `chain_units(model)` (the sum of the layer sizes of a Boltzmann
    machine) within SHARD_UNITS. E.g. 52,428 for a 64-16 RBM, 6,533 for a 784-500 RBM, 2,554 for a 784-500-2000
    DBN."""
    return max(1, SHARD_UNITS // chain_units(model))


def shard_seed(seed: int, stage: str, index: int) -> int:
    """The seed of shard `index` of `stage` ('ais' or 'raise'): seed + offset for shard 0 (the stage's seed before
    sharding), else the first 63 bits of sha256("raise-eval/<stage>/<seed>/<index>")."""
    if index == 0:
        return stage_seed(seed, stage)  # as before sharding existed
    digest = hashlib.sha256(f"raise-eval/{stage}/{seed}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def shard_generator(seed: int, stage: str, index: int, device: torch.device) -> torch.Generator:
    """A generator on `device` seeded with `shard_seed(seed, stage, index)`."""
    return torch.Generator(device=device).manual_seed(shard_seed(seed, stage, index))


def shard_bounds(total: int, per_shard: int) -> list[tuple[int, int]]:
    """[(begin, end)] of consecutive shards of `per_shard` items covering range(total)."""
    return [(b, min(b + per_shard, total)) for b in range(0, total, per_shard)]


def raise_vectors_per_shard(shard_size: int, raise_chains: int) -> int:
    """Whole test vectors per RAISE shard: as many as fit `shard_size` chains, at least one."""
    return max(1, shard_size // raise_chains)


def bytes_per_chain(units: int, dtype: torch.dtype) -> int:
    """Peak bytes one annealing chain occupies: its states, the cached odd-layer inputs, the kernel's and the
    weight update's buffers and the float64 log-weights. Calibrated on the CPU (peak RSS of ais and
    raise_log_likelihood on 784-500 RBMs, a 784-500-1000 DBM and a 784-500-2000 DBN: 16 to 26 bytes per unit in
    float32, 38 in float64), with a margin."""
    size = torch.empty((), dtype=dtype).element_size()
    return units * (5 * size + 12) + 64


def log_f_bytes(model, num_vectors: int, num_samples: int, chunk_elements: int) -> int:
    """Peak bytes of one chunk of the importance-sampled log f(v) estimates of `num_vectors` test vectors
    (`estimators.unnormalized`, whose chunks are fixed by the settings): about 20 bytes per (vector x sample x
    unit) measured on a DBM and a DBN, float32 or float64, with a margin."""
    vectors = min(num_vectors, max(1, chunk_elements // (num_samples * max(model.layer_sizes))))
    return 32 * vectors * num_samples * sum(model.layer_sizes)


# --------------------------------------------------------------------------- running the shards


def _local_shards(num_shards: int, done: dict[int, Any]) -> list[int]:
    rank, world = distributed.rank_and_world()
    return [i for i in range(num_shards) if i % world == rank and i not in done]


def _run(
    stage: str,
    num_shards: int,
    run_shard: Callable[[int], dict],
    progress: bool,
    store=None,
) -> dict[int, dict]:
    """Run this rank's shards not already in `store`, saving each to `store` as it finishes; gather all.

    With a store, Ctrl-C is deferred (`interrupts.deferred_interrupts`): the shard in progress saves its annealing state
    at the end of the step, then the run stops with KeyboardInterrupt."""
    done = dict(store.shards(stage)) if store is not None else {}
    todo = _local_shards(num_shards, done)
    if store is not None:
        store.note_read_back(stage.upper(), len(done), num_shards)
    bar = tqdm(total=len(todo), desc=f"{stage} shards", disable=not progress or num_shards == 1, leave=False)
    try:
        with deferred_interrupts() if store is not None else contextlib.nullcontext():
            for i in todo:
                done[i] = run_shard(i)
                if store is not None:
                    store.save_shard(stage, i, done[i])
                    if interrupt_requested():
                        raise KeyboardInterrupt
                bar.update(1)
    finally:
        bar.close()
    return distributed.gather_shards(done)  # every rank's shards, on every rank (log-weights only: cheap)


def sharded_ais(
    path,
    betas: Tensor,
    num_chains: int,
    *,
    seed: int,
    shard_size: int,
    progress: bool = False,
    store=None,
) -> AISResult:
    """`ais` with the chains split into shards of `shard_size` (see the module docstring), run one at a time.

    Returns the AISResult of all `num_chains` chains: log_weights (num_chains,) in shard order, summaries over
    them. final_state is the chains' final state when there is one shard run here, else None. seconds is this
    stage's wall time.
    """
    start = time.perf_counter()
    device = path.model.device
    bounds = shard_bounds(num_chains, shard_size)
    last: dict[str, Any] = {}

    def run_shard(i: int) -> dict:
        begin, end = bounds[i]
        generator = shard_generator(seed, "ais", i, device)
        checkpoint = None if store is None else store.checkpoint("ais", i, generator)
        result = ais(path, betas, end - begin, generator=generator, progress=progress, checkpoint=checkpoint)
        last["state"] = result.final_state if len(bounds) == 1 else None
        return {"log_weights": result.log_weights}

    results = _run("ais", len(bounds), run_shard, progress, store)
    log_w = torch.cat([results[i]["log_weights"].to(device) for i in range(len(bounds))])
    return AISResult.from_log_weights(log_w, betas.numel() - 1, start, final_state=last.get("state"))


def sharded_raise(
    path,
    data: Tensor,
    betas: Tensor,
    num_chains: int,
    *,
    seed: int,
    shard_size: int,
    unroll: Any = None,
    dbn_start: str = "heated",
    progress: bool = False,
    store=None,
) -> RAISEResult:
    """`raise_log_likelihood` with the rows of `data` (N, n_visible) split into shards of whole vectors (see the
    module docstring), run one at a time.

    Returns the RAISEResult of all N vectors in their order: log_weights (N, C), log_likelihood (N,),
    log_unnormalized (N,) or None, mean and stderr over the N estimates. seconds is this stage's wall time.
    """
    start = time.perf_counter()
    device = path.model.device
    bounds = shard_bounds(data.shape[0], raise_vectors_per_shard(shard_size, num_chains))

    def run_shard(i: int) -> dict:
        begin, end = bounds[i]
        generator = shard_generator(seed, "raise", i, device)
        r = raise_log_likelihood(
            path,
            data[begin:end],
            betas,
            num_chains,
            generator=generator,
            unroll=unroll,
            dbn_start=dbn_start,
            progress=progress,
            checkpoint=None if store is None else store.checkpoint("raise", i, generator),
        )
        return {"log_weights": r.log_weights, "log_unnormalized": r.log_unnormalized, "start": r.start}

    results = _run("raise", len(bounds), run_shard, progress, store)
    parts = [results[i] for i in range(len(bounds))]
    log_f: Optional[Tensor] = None
    if parts[0]["log_unnormalized"] is not None:
        log_f = torch.cat([p["log_unnormalized"].to(device) for p in parts])
    # Per-example estimates depend on their own row only, so recomputing them from the joined weights is exact.
    log_w = torch.cat([p["log_weights"].to(device) for p in parts])
    return RAISEResult.from_log_weights(log_w, log_f, betas.numel() - 1, start, parts[0]["start"])
