"""Exact Bernoulli sampling with an explicit torch.Generator (never the global RNG).

x = 1{u < p} with u ~ Uniform[0, 1). On CPU, PyTorch draws a uniform through a serial per-element kernel
(about 3 ns each), which would cost an annealing step more than its arithmetic. We instead compare p with u
one random byte at a time ("lazy bits"): write u = (b + u') / 256 with b a uniform byte and u' ~ U[0, 1)
independent, then

    u < p  <=>  u' < d,   d = 256 p - b.

If d >= 1 the answer is 1 and if d <= 0 it is 0, whatever u'; only when 0 < d < 1 (probability 1/256, b equal
to floor(256 p)) is a fresh uniform u' drawn. So P(x = 1) = p up to the uniform's resolution, which is finer than
a float32 uniform's: u' lies on float32's grid of 2^-24 (float64's 2^-53), so u = (b + u') / 256 on one of 2^-32
(2^-61), and P(x = 1) is p rounded up to that grid (a float32 p = 1e-12 is sampled with probability 2^-32, about
2.3e-10, where torch.rand's comparison would give 2^-24); d is computed without rounding where it matters (a
power-of-two scaling and a Sterbenz subtraction when 0 < d < 1). One 64-bit draw over the full range
gives 8 uniform bytes.

The passes over the probabilities are few because each matters at this size: the bytes are converted to floats,
-d = b - 256 p is computed in one pass (at most -1: x = 1, at least 0: x = 0, in between: a tie), the ties are found
from block minima of these values read as integers, their d are gathered, and one comparison -d < 0 leaves x.
On other devices (CUDA's Philox is fast) the plain comparison with torch.rand is used.

Where the C kernels of `raise_eval.models.native` compile (step.c), the CPU path draws the same way in one pass, its
bytes and tie uniforms from Philox4x32-10 (Salmon et al., 2011; the generator of torch's CUDA and of JAX) keyed by 64
bits drawn from the torch.Generator, one key per call: element i's byte comes from a counter derived from i alone and its
tie uniform from another, so any split of the elements between threads gives the same samples. The same
distribution as the PyTorch passes (which remain with RAISE_EVAL_NATIVE=0), other random numbers; the samples of
logits (float32) take their sigmoid in the same pass (relative error within 1.3 2^-23, as torch.sigmoid's).
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


_INT64_MIN = -(1 << 63)
_TIE_BLOCK = 32
# -1. read as a signed integer of its width: in [-1, 0] a float's integer is 0 for 0., and for a negative float
# grows with the magnitude from the minimum integer (-0.) to this value (-1.).
_MINUS_ONE_BITS = {
    torch.float32: int(torch.tensor(-1.0, dtype=torch.float32).view(torch.int32)),
    torch.float64: int(torch.tensor(-1.0, dtype=torch.float64).view(torch.int64)),
}


def _tie_indices(neg_d: Tensor) -> Tensor:
    """Indices, ascending, of the entries strictly between -1 and 0 of a contiguous 1-D float tensor.

    Read as signed integers those entries, and only those, are below the integer of -1. (see _MINUS_ONE_BITS: a
    negative float's integer grows with its magnitude from that of -0., the minimum, so -1. and everything beyond
    it lie above; non-negative floats are non-negative integers, a NaN either that or, with its sign bit set, above
    the integer of -1.; -0. would count too, harmlessly: its tie is resolved to 0). Ties are rare (1/256), so first
    find the blocks of 32 entries whose minimum is below it, then search only those blocks, gathered and flattened.
    """
    ints = neg_d.view(torch.int32 if neg_d.dtype == torch.float32 else torch.int64)
    threshold = _MINUS_ONE_BITS[neg_d.dtype]
    n = ints.numel()
    head = n - n % _TIE_BLOCK
    found = torch.zeros(0, dtype=torch.int64)
    if head > 0:
        blocks = ints[:head].view(-1, _TIE_BLOCK)
        rows = torch.nonzero(blocks.amin(1) < threshold).squeeze(-1)
        hits = torch.nonzero(blocks.index_select(0, rows).view(-1) < threshold).squeeze(-1)
        found = rows.index_select(0, hits // _TIE_BLOCK).mul_(_TIE_BLOCK).add_(hits % _TIE_BLOCK)
    if head < n:
        tail = torch.nonzero(ints[head:] < threshold).squeeze(-1).add_(head)
        found = torch.cat([found, tail])
    return found


def _native_sample(flat: Tensor, generator: torch.Generator, out: Tensor, from_logits: bool = False) -> bool:
    """Samples of `flat` (probabilities, or float32 logits) into `out` (1-D, contiguous, may be `flat`) by the Philox
    kernels of `raise_eval.models.native` (step.c), keyed by one 64-bit draw from `generator`; False (nothing drawn)
    where the kernels are unavailable."""
    from raise_eval.models import native

    lib = native.library("step")
    if lib is None:
        return False
    if from_logits:
        kernel = lib.bernoulli_philox_logits_float32
    else:
        kernel = lib.bernoulli_philox_float32 if out.dtype == torch.float32 else lib.bernoulli_philox_float64
    key = int(_scratch("key", 1, torch.int64).random_(_INT64_MIN, None, generator=generator)[0])
    key0, key1 = key & 0xFFFFFFFF, (key >> 32) & 0xFFFFFFFF
    n, size = flat.numel(), out.element_size()

    def run(begin: int, end: int) -> None:
        kernel(end - begin, flat.data_ptr() + begin * size, out.data_ptr() + begin * size, key0, key1, begin)

    # pieces of whole 256-element blocks: element i's random numbers depend on i alone, so any split is the same draw
    native.run_in_parts(run, native.split_rows(n, torch.get_num_threads() if n >= _NATIVE_SPLIT else 1, 256))
    return True


_NATIVE_SPLIT = 1 << 16  # elements from which the native draw is split between threads


def _sample_lazy_bytes(flat_probs: Tensor, generator: torch.Generator, out: Tensor) -> None:
    # flat_probs and out: 1-D, contiguous, same length (a multiple of 8); out may be flat_probs itself.
    n = flat_probs.numel()
    # random_ from the minimum int64 with no upper bound draws all 64 bits: 8 uniform bytes per word.
    words = _scratch("words", n // 8, torch.int64).random_(_INT64_MIN, None, generator=generator)
    random_bytes = _scratch("bytes", n, out.dtype).copy_(words.view(torch.uint8))  # a kept buffer, no temporary
    # -d = b - 256 p in one pass (256 p is exact, so the one rounding is the subtraction's, exact where |d| < 1).
    torch.sub(random_bytes, flat_probs, alpha=256.0, out=out)
    ties = _tie_indices(out)
    tie_d = out[ties].neg_() if ties.numel() > 0 else None
    out.lt_(0.0)  # 1. where d > 0 (d >= 1 but at the ties), 0. where d <= 0 (a NaN p gives 0., as torch.rand's path)
    if tie_d is not None:
        u = torch.rand(ties.numel(), generator=generator, dtype=out.dtype)
        out[ties] = u.lt_(tie_d)


def _lazy(x: Tensor) -> bool:
    """Whether x (probabilities or logits) is sampled by random bytes."""
    return (
        x.device.type == "cpu"
        and x.numel() >= _MIN_LAZY
        and x.dtype in (torch.float32, torch.float64)
        and sys.byteorder == "little"
        and x.is_contiguous()
    )


def sample_bernoulli_probs_(probs: Tensor, generator: torch.Generator) -> Tensor:
    """In place: replace each probability in `probs` by a sample x ~ Bernoulli(p) (values 0. and 1.).

    `probs` must be contiguous; `generator` must live on its device. Returns `probs`.
    """
    n = probs.numel()
    if not _lazy(probs):
        u = torch.rand(probs.shape, generator=generator, device=probs.device, dtype=probs.dtype)
        return probs.gt_(u)  # p > u, written over p in one pass
    flat = probs.view(-1)
    if _native_sample(flat, generator, flat):
        return probs
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
    """In place: replace each logit by a sample x ~ Bernoulli(sigmoid(logit)). Returns `logits`.

    Float32 on the CPU, where the native kernels are available (`raise_eval.models.native`, step.c), the sigmoid is
    taken in the draw's pass (relative error within 1.3 2^-23, as torch.sigmoid's)."""
    if logits.dtype == torch.float32 and _lazy(logits):
        flat = logits.view(-1)
        if _native_sample(flat, generator, flat, from_logits=True):
            return logits
    return sample_bernoulli_probs_(logits.sigmoid_(), generator)


def sample_bernoulli_logits(logits: Tensor, generator: torch.Generator) -> Tensor:
    """x ~ Bernoulli(sigmoid(logits)) elementwise, a new tensor with the shape and dtype of `logits`."""
    return sample_bernoulli_probs_(torch.sigmoid(logits), generator)
