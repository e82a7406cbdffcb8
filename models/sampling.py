"""Exact Bernoulli sampling with an explicit torch.Generator (never the global RNG).

x = 1{u < p} with u ~ Uniform[0, 1). On CPU, PyTorch draws a uniform through a serial per-element kernel
(about 3 ns each), which would cost an annealing step more than its arithmetic. We instead compare p with u
one random byte at a time ("lazy bits"): write u = (b + u') / 256 with b a uniform byte and u' ~ U[0, 1)
independent, then

    u < p  <=>  u' < d,   d = 256 p - b.

If d >= 1 the answer is 1 and if d <= 0 it is 0, whatever u'; only when 0 < d < 1 (probability 1/256, b equal
to floor(256 p)) is a fresh uniform u' drawn. So P(x = 1) = p exactly, with a finer resolution than a float32
uniform: u' has float32's 2^-24, so u = (b + u') / 256 resolves 2^-32 in the seven full-byte lanes and 2^-31 in
the 7-bit lane (u = (b + u') / 128); d is computed without rounding (a power-of-two scaling and a Sterbenz
subtraction). One 64-bit draw gives 7 uniform bytes and a 7-bit one (used with 128 in place of 256).
On other devices (CUDA's Philox is fast) the plain comparison with torch.rand is used.
"""

from __future__ import annotations

import sys
import threading

import torch
from torch import Tensor

_MIN_LAZY = 4096  # below this the plain path is as fast
_local = threading.local()  # per-thread scratch: multi-megabyte temporaries page-fault when allocated afresh


def _scratch(name: str, numel: int, dtype: torch.dtype) -> Tensor:
    buffers = _local.__dict__.setdefault("buffers", {})
    buf = buffers.get((name, dtype))
    if buf is None or buf.numel() < numel:
        buf = buffers[(name, dtype)] = torch.empty(numel, dtype=dtype)
    return buf[:numel]


def _nonzero_indices(x: Tensor) -> Tensor:
    """Indices of the nonzero entries of a contiguous 1-D tensor of non-negative floats, ascending.

    Ties are rare (1/256), so first find the blocks of 32 entries holding any (a max over each block, scanned as
    int64 pairs for float32), then search only those blocks, gathered and flattened (torch.nonzero is slower on
    two dimensions): a fraction of the cost of nonzero on the whole tensor.
    """
    n = x.numel()
    head = n - n % 32
    if head == 0:
        return torch.nonzero(x).squeeze(-1)
    blocks = x[:head].view(-1, 32)
    scan = blocks.view(torch.int64) if x.dtype == torch.float32 else blocks  # non-negative either way
    rows = torch.nonzero(scan.amax(1)).squeeze(-1)
    hits = torch.nonzero(blocks.index_select(0, rows).view(-1)).squeeze(-1)
    found = rows.index_select(0, hits >> 5).bitwise_left_shift_(5).bitwise_or_(hits & 31)  # rows * 32 + column
    if head < n:
        found = torch.cat([found, torch.nonzero(x[head:]).squeeze(-1) + head])
    return found


def _sample_lazy_bytes(flat_probs: Tensor, generator: torch.Generator, out: Tensor) -> None:
    # flat_probs and out: 1-D, contiguous, same length (a multiple of 8); out may be flat_probs itself.
    n = flat_probs.numel()
    words = _scratch("words", n // 8, torch.int64).random_(generator=generator)
    random_bytes = _scratch("bytes", n, out.dtype).view(-1, 8)
    random_bytes.copy_(words.view(torch.uint8).view(-1, 8))  # cast into a kept buffer, not a fresh temporary
    # random_() on int64 fills [0, 2^63): bytes 0..6 of each word are uniform on 0..255, byte 7 on 0..127,
    # so d = 256 p - b in seven lanes and 128 p - b in the eighth (scalings by powers of two are exact).
    torch.mul(flat_probs, 256.0, out=out)
    d = out.view(-1, 8)
    d[:, 7].mul_(0.5)
    d.sub_(random_bytes).clamp_(0.0, 1.0)
    fractional = torch.frac(out, out=_scratch("frac", n, out.dtype))
    ties = _nonzero_indices(fractional)
    if ties.numel() > 0:
        u = torch.rand(ties.numel(), generator=generator, dtype=out.dtype)
        out[ties] = u.lt_(out[ties])


def sample_bernoulli_probs_(probs: Tensor, generator: torch.Generator) -> Tensor:
    """In place: replace each probability in `probs` by a sample x ~ Bernoulli(p) (values 0. and 1.).

    `probs` must be contiguous; `generator` must live on its device. Returns `probs`.
    """
    n = probs.numel()
    if (
        probs.device.type != "cpu"
        or n < _MIN_LAZY
        or probs.dtype not in (torch.float32, torch.float64)
        or sys.byteorder != "little"
        or not probs.is_contiguous()
    ):
        u = torch.rand(probs.shape, generator=generator, device=probs.device, dtype=probs.dtype)
        return probs.gt_(u)  # p > u, written over p in one pass
    flat = probs.view(-1)
    head = n - n % 8
    _sample_lazy_bytes(flat[:head], generator, flat[:head])
    if head < n:
        u = torch.rand(n - head, generator=generator, dtype=flat.dtype)
        flat[head:] = u.lt_(flat[head:])
    return probs


def sample_bernoulli_probs(probs: Tensor, generator: torch.Generator) -> Tensor:
    """x ~ Bernoulli(probs) elementwise: a new tensor, same shape and dtype as `probs`, values 0. and 1."""
    return sample_bernoulli_probs_(probs.clone(memory_format=torch.contiguous_format), generator)


def sample_bernoulli_logits_(logits: Tensor, generator: torch.Generator) -> Tensor:
    """In place: replace each logit by a sample x ~ Bernoulli(sigmoid(logit)). Returns `logits`."""
    return sample_bernoulli_probs_(logits.sigmoid_(), generator)


def sample_bernoulli_logits(logits: Tensor, generator: torch.Generator) -> Tensor:
    """x ~ Bernoulli(sigmoid(logits)) elementwise, a new tensor with the shape and dtype of `logits`."""
    return sample_bernoulli_probs_(torch.sigmoid(logits), generator)
