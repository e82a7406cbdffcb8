"""Reusable temporaries for the annealing step's samplers and weight updates (one store per path)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor


class Buffers:
    """Reusable temporaries, one per name: multi-megabyte tensors allocated afresh at every annealing step page-fault,
    which costs as much as the arithmetic. Not thread-safe: one per path. `scope(prefix)` gives a view whose names
    are prefixed (one per layer), sharing the store."""

    def __init__(self, prefix: str = "", store: Optional[dict] = None):
        self._buffers: dict[str, Tensor] = {} if store is None else store
        self._prefix = prefix

    def scope(self, prefix: str) -> Buffers:
        return Buffers(f"{self._prefix}{prefix}/", self._buffers)

    def like(self, name: str, shape, like: Tensor, dtype: Optional[torch.dtype] = None) -> Tensor:
        """A contiguous buffer shaped `shape` on like's device, with like's dtype unless `dtype` is given (contents
        undefined)."""
        return self.get(name, shape, like.dtype if dtype is None else dtype, like.device)

    def get(self, name: str, shape, dtype: torch.dtype, device) -> Tensor:
        """A contiguous buffer (contents undefined)."""
        shape = tuple(shape)
        name = self._prefix + name
        buf = self._buffers.get(name)
        if buf is None or tuple(buf.shape) != shape or buf.dtype != dtype or buf.device != torch.device(device):
            buf = self._buffers[name] = torch.empty(shape, dtype=dtype, device=device)
        return buf
