"""Matrix products of binary states in half precision, with the weights split into bfloat16 terms.

A state of 0s and 1s (or -1s and 1s) is exact in bfloat16, and a bfloat16 tensor-core product accumulates in float32,
so x W equals x W' up to the accumulation's rounding (the tensor cores', as a float32 product's own), where
W' = W_1 + ... + W_n is the sum of the bfloat16 terms of W:
W_1 = bf16(W), W_2 = bf16(W - W_1), ... Three terms hold a float32 weight exactly (8 significant bits each, the
exponent range of float32), except for weights so small that a term underflows (|W| below about 2^-110: the bound
is then positive) or so large that the first rounds to infinity (|W| >= 3.39e38: refused); the products run on the
tensor cores, several times faster than float32's. The n products are one: the state repeated n times along its
units, [x, ..., x] (B, n m), times the terms stacked, [W_1; ...; W_n] (n m, k).

What remains, W - W', is computed exactly in float64 (`split_error_bound`): for states in {0, 1} or {-1, 1},
|x (W - W') y| <= sum_ij |W - W'|_ij, so every log-density the products enter (a joint's, or a marginal's with some
layers summed out: softplus is 1-Lipschitz) moves by at most s B, s the weight scale, B that sum over the weight
matrices; log Z by at most the same, and a log-likelihood by at most twice it. The estimators report it.

The TF32 split (`tf32_terms`) is the same idea on the TF32 tensor cores, which read float32 operands to 10
significant bits: W = hi + lo with hi = W rounded to TF32 (read exactly) and lo = W - hi (read to within
2^-10 |lo|, whether the hardware rounds or truncates it), two products stacked as above, float32 in and out. It is
not exact: its bound (`tf32_split_error_bound`) is s sum_ij 2^-10 |lo_ij|, about 2^-21 s sum |W|.

The half path (`half_path_weights`) takes one float16 term, W~ = fp16(W) (11 significant bits), and does not bound
anything: the chains anneal the model with weights W~, whose products x W~ are exact in float16 operands (up to the
float32 accumulation, as ever), and the path's ends at beta = 1 stay the model's own (`kernels.binary_program`: the
log-weights gain log f(x) - log f~(x) at beta = 1): AIS's log Z stays the model's, without bias, and RAISE
estimates the rounded model (`evaluation.rounding` measures how far its log-likelihood lies from the model's). The
spread of log f - log f~ over model states is about 0.005 nats on the 784-500 MNIST RBM (0.046 rounded to bfloat16).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import contextmanager

import torch
from torch import Tensor

HALF = torch.bfloat16
MAX_TERMS = 3
HALF_PATH = torch.float16  # the half path's one term: float16's 11 significant bits beat bfloat16's 8


def split_terms(weight: Tensor, terms: int = MAX_TERMS) -> list[Tensor]:
    """The bfloat16 terms W_1, ..., W_terms of `weight` (each shaped like it), greedy: each the rounding of what the
    ones before left."""
    rest = weight.double()
    out = []
    for _ in range(terms):
        term = rest.to(HALF)
        out.append(term)
        rest = rest - term.double()
    return out


def split_error_bound(weights: Sequence[Tensor], scale: float = 1.0, terms: int = MAX_TERMS) -> float:
    """|s| sum over the weight matrices of sum_ij |W - (W_1 + ... + W_terms)|, in float64: the largest change the
    split products can make to a log-density of binary (0/1 or +-1) states (module docstring)."""
    total = 0.0
    for w in weights:
        residual = w.double() - sum(t.double() for t in split_terms(w, terms))
        total += float(residual.abs().sum())
    return abs(float(scale)) * total if math.isfinite(total) else math.inf  # inf: a term overflowed


def terms_needed(weights: Sequence[Tensor]) -> int:
    """The fewest terms (at most MAX_TERMS) whose split of every weight matrix is exact; MAX_TERMS where none is."""
    for terms in range(1, MAX_TERMS + 1):
        if split_error_bound(weights, 1.0, terms) == 0.0:
            return terms
    return MAX_TERMS


def half_path_weights(weight: Tensor) -> Tensor:
    """W~ = fp16(W) (to nearest), the weights of the model whose path the half path's chains anneal; refused where a
    weight rounds to infinity in float16 (|W| >= 65520), naming the way out."""
    rounded = weight.to(HALF_PATH)
    if not bool(torch.isfinite(rounded).all()):
        largest = float(weight.abs().max())
        raise ValueError(
            f"products='half-path' cannot hold these weights in float16 (the largest |W| is {largest:.4g}, float16 "
            "stops at 65504); use products='half-split' or 'model'"
        )
    return rounded


def out_dtype_products_available(device: torch.device, dtype: torch.dtype = HALF) -> bool:
    """Whether torch multiplies `dtype` (bfloat16 or float16) matrices into a float32 result on `device` (aten::mm's
    out_dtype)."""
    try:
        a = torch.ones(2, 2, dtype=dtype, device=device)
        return torch.mm(a, a, out_dtype=torch.float32).dtype == torch.float32
    except (RuntimeError, TypeError, NotImplementedError):
        return False


# TF32: float32's exponent and 10 explicit significant bits; tensor cores read float32 operands at that precision
TF32_DROPPED_BITS = 13  # of float32's 23 explicit significant bits
TF32_RELATIVE_ERROR = 2.0**-10  # |y - tf32(y)| < 2^-10 |y| whether the hardware rounds or truncates


def tf32_round(weight: Tensor) -> Tensor:
    """float32 `weight` rounded to TF32 precision (to nearest, ties to even; the low 13 significant bits zero), as
    float32: exact in TF32, so a tensor core reads it unchanged. Finite inputs of |w| < 3.4e38 stay finite."""
    bits = weight.float().contiguous().view(torch.int32)
    keep = (bits >> TF32_DROPPED_BITS) & 1  # ties to even
    rounded = (bits + (1 << (TF32_DROPPED_BITS - 1)) - 1 + keep) & ~((1 << TF32_DROPPED_BITS) - 1)
    return rounded.view(torch.float32)


def tf32_terms(weight: Tensor) -> list[Tensor]:
    """The two float32 terms [hi, lo] of the TF32 split: hi = tf32_round(W), lo = W - hi (exact in float32, since hi
    is W's rounding: lo holds W's low bits). A TF32 product reads hi exactly and lo to within 2^-10 |lo|."""
    w = weight.float()
    hi = tf32_round(w)
    return [hi, w - hi]


def tf32_split_error_bound(weights: Sequence[Tensor], scale: float = 1.0) -> float:
    """|s| sum over the weight matrices of sum_ij 2^-10 |lo_ij|, in float64: the largest change the TF32-split
    products (states times [hi; lo] on TF32 tensor cores) can make to a log-density of binary states, whether the
    tensor cores round lo or truncate it (module docstring's argument, with |lo - tf32(lo)| < 2^-10 |lo|)."""
    total = 0.0
    for w in weights:
        total += float(tf32_terms(w)[1].double().abs().sum()) * TF32_RELATIVE_ERROR
    return abs(float(scale)) * total if math.isfinite(total) else math.inf


def path_weights(products: str, weight: Tensor) -> Tensor:
    """W~ of a rounded path (`step_programs.ROUNDED_PATHS`): fp16(W) for 'half-path' (float16, `half_path_weights`),
    tf32(W) for 'tf32-path' (float32, `tf32_round`)."""
    if products == "half-path":
        return half_path_weights(weight)
    if products == "tf32-path":
        return tf32_round(weight)
    raise ValueError(f"products {products!r} anneals no rounded path (those are half-path and tf32-path)")


@contextmanager
def tf32_products():
    """float32 matrix products on CUDA through the TF32 tensor cores inside the block, torch's setting restored."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


class SplitWeight:
    """One weight matrix W (m, k), given as its terms `parts` (each (m, k): `split_terms` or `tf32_terms`), ready for
    x W (x: (B, terms m), the state repeated) and y W^T (y: (B, terms k))."""

    def __init__(self, parts: Sequence[Tensor]):
        self.terms = len(parts)
        self.forward = torch.cat(parts, 0).contiguous()  # (terms m, k)
        self.backward = torch.cat([p.t() for p in parts], 0).contiguous()  # (terms k, m)
