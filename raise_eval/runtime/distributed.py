"""Several processes (and GPUs) through torch.distributed: `torchrun ... raise-eval evaluate ...`.

torchrun starts one process per rank and sets RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous variables. Each
rank runs the shards i with i % world_size == rank (see `raise_eval.runtime.sharding`); the per-shard results travel to
every rank (`all_gather_object`, on the CPU), so every rank assembles exactly what one process would have and
`evaluate` returns the same report everywhere. Only rank 0 prints and writes files (the CLI's job).

Backends: gloo on CPU, nccl on CUDA (rank r on cuda:LOCAL_RANK when the device names no index).
"""

from __future__ import annotations

import os
from typing import Any, Optional

import torch
import torch.distributed as dist


def launched_by_torchrun() -> bool:
    """Whether this process is one of several started by torchrun (WORLD_SIZE > 1 in the environment)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def init_from_env(device: torch.device) -> torch.device:
    """Join the process group torchrun describes (no-op when already joined) and return this rank's device.

    A CUDA device without an index becomes cuda:LOCAL_RANK, so that the ranks of a node share out its GPUs.
    """
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if device.type == "cuda":
        torch.cuda.set_device(device)  # nccl's object collectives use the current device
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return device


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of the initialized process group, else (0, 1)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def to_cpu(obj: Any) -> Any:
    """The same nested dicts/lists/tuples with every tensor moved to the CPU (for pickling between ranks)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def gather_shards(local: dict[int, Any]) -> dict[int, Any]:
    """Every rank's {shard index: result} merged, on every rank (tensors on the CPU); `local` itself with one
    process."""
    _, world = rank_and_world()
    if world == 1:
        return local
    parts: list[Optional[dict]] = [None] * world
    dist.all_gather_object(parts, to_cpu(local))
    merged: dict[int, Any] = {}
    for part in parts:
        merged.update(part or {})
    return merged


def broadcast_from_rank0(obj: Any) -> Any:
    """Rank 0's `obj` on every rank (tensors on the CPU); `obj` itself with one process."""
    _, world = rank_and_world()
    if world == 1:
        return obj
    box = [to_cpu(obj)]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    if rank_and_world()[1] > 1:
        dist.barrier()


def shutdown() -> None:
    """Leave the process group cleanly after a finished run: every rank waits for the others, then the group is
    destroyed. Left to interpreter exit, a rank that exits first closes gloo's connections under the other's
    background threads, which can abort that process ("terminate called without an active exception")."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
