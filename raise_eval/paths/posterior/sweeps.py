"""The DBN posterior path's unit-wise Gibbs sweeps (the C kernel, the bounded and the full PyTorch sweeps) and
their arithmetic (folds of products of factors, the native kernel's plan), as a mixin of `DBNPosteriorPath`."""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from raise_eval.models import native
from raise_eval.models.numerics import expm1_
from raise_eval.models.sampling import sample_bernoulli_logits_
from raise_eval.paths.posterior.common import _LOG1P_FORM_MAX_STEP, softplus_increment


def _log_range(dtype: torch.dtype) -> float:
    """|log y| below which y and 1 / y are normal numbers of `dtype`, with a margin (about 80 for float32)."""
    info = torch.finfo(dtype)
    return 0.9 * min(math.log(info.max), -math.log(info.tiny))


def _fold_plan(weights: Tensor, limit: float) -> int:
    """How many times a sweep may fold its per-input factors in half before taking logs (see `DBNPosteriorPath`).

    weights: W_{l-1} shaped (n_below, n_l). The factor of input i for unit j lies in [e^-|w_ij|, e^|w_ij|], so a
    product over a group of inputs lies within e^(+-sum of |w_ij| over the group): the folds stop before that sum
    passes `limit` for any unit.
    """
    sums = weights.abs().double().t().contiguous()  # (n_l, n_below)
    if float(sums.max()) > limit:
        raise ValueError(
            f"a weight of magnitude {float(sums.max()):.3g} is beyond what the DBN posterior sweep computes in "
            f"{weights.dtype} (|w| <= {limit:.0f}); convert the model to float64"
        )
    width, folds = sums.shape[1], 0
    while width > 1:
        half = width // 2
        folded = sums[:, :half] + sums[:, width - half : width]
        if float(folded.max()) > limit:
            break
        sums = torch.cat([folded, sums[:, half : width - half]], dim=1)
        width -= half
        folds += 1
    return folds


def _fold_views(factors: Tensor, folds: int) -> tuple[list[tuple[Tensor, Tensor]], Tensor]:
    """The pairs (left half, right half) of views of a (rows, n) buffer that `folds` pairwise foldings multiply
    (element i with i + width - half, the middle one of an odd width left alone), and the view of what is left."""
    pairs, width = [], factors.shape[-1]
    for _ in range(folds):
        half = width // 2
        pairs.append((factors[:, :half], factors[:, width - half : width]))
        width -= half
    return pairs, factors[:, :width]


def _fold_log_sum(pairs: list[tuple[Tensor, Tensor]], rest: Tensor) -> Tensor:
    """sum of the logs of a (rows, n) buffer's entries over its last dimension, shaped (rows,): the entries are
    multiplied pairwise in place along `pairs` (`_fold_views`), then the logs of the `rest` are summed."""
    for left, right in pairs:
        left.mul_(right)
    return torch.log(rest).sum(-1)


def _copy_rows_(dest: Tensor, index: Tensor, source: Tensor) -> None:
    """dest[index] = source along dimension 0 (index_copy_), bit for bit.

    ATen's index_copy_ on the CPU moves one element at a time, so rows of many small elements copy at a fraction of
    memory speed: where both tensors are contiguous with the same dtype and a row's bytes allow, both are viewed as
    complex128 (16-byte elements, a plain copy of the same bytes), which is three times faster for the sweep's rows
    of 3 x 784 float32 (650 -> 190 us for 360 rows). Anything else goes to index_copy_ as it is.
    """
    fast = (
        dest.device.type == "cpu"
        and dest.dim() >= 2
        and index.numel() > 0
        and dest.dtype == source.dtype
        and dest.is_contiguous()
        and source.is_contiguous()
        and dest[0].numel() * dest.element_size() % 16 == 0
        and all(t.storage_offset() * t.element_size() % 16 == 0 for t in (dest, source))
    )
    if fast:
        dest.flatten(1).view(torch.complex128).index_copy_(0, index, source.flatten(1).view(torch.complex128))
    else:
        dest.index_copy_(0, index, source)


_SWEEPS = ("auto", "native", "bounded", "full")
_NATIVE_LANES = 16  # LANES of dbn_sweep.c: the inputs a group's products advance by
_NATIVE_CARRIED_LIMIT = 0.9 * math.log(torch.finfo(torch.float64).max)  # |log| of the double carried between logs
_NATIVE_TILE_BYTES = 32 * 1024  # a tile of rows' moments, visited by every unit in turn: within the L1 cache


def _native_plan(weights: Tensor, limit: float) -> Optional[tuple[Tensor, Tensor]]:
    """The native sweep's groups of inputs for a layer (see dbn_sweep.c): (ends, take_log), int64 and uint8, or None.

    weights: W_{l-1} shaped (n_below, n_l). A factor of input i for unit j lies within e^(+-|w_ij|), so a product
    over a group stays within e^(+-b), b the largest sum of |w_ij| over the group's inputs for any unit: groups
    grow by LANES inputs while b stays below `limit` (the dtype's range), and a group's product is carried in a
    double, its log taken before the carried bound would pass 0.9 log(DBL_MAX). None if LANES inputs alone can
    leave the range (the other sweeps then serve)."""
    magnitudes = weights.abs().double()  # (n_below, n_l)
    n_below = magnitudes.shape[0]
    chunks = [magnitudes[i : i + _NATIVE_LANES].sum(0) for i in range(0, n_below, _NATIVE_LANES)]  # each (n_l,)
    ends, bounds = [], []
    current, end = None, 0
    for chunk in chunks:
        grown = chunk if current is None else current + chunk
        if float(grown.max()) > limit:
            if current is None:
                return None
            ends.append(end)
            bounds.append(float(current.max()))
            grown = chunk
            if float(grown.max()) > limit:
                return None
        current, end = grown, min(end + _NATIVE_LANES, n_below)
    ends.append(end)
    bounds.append(float(current.max()))
    take_log, carried = [], 0.0
    for k, b in enumerate(bounds):
        carried += b
        last = k == len(bounds) - 1
        take = last or carried + bounds[k + 1] > _NATIVE_CARRIED_LIMIT
        take_log.append(1 if take else 0)
        if take:
            carried = 0.0
    return torch.tensor(ends, dtype=torch.int64), torch.tensor(take_log, dtype=torch.uint8)


# Largest |weight| for which the bounded sweep's bound on the Taylor rest, |w|^3 e^|w| / 6, stays useful and finite.
_BOUNDED_MAX_WEIGHT = 20.0
_BOUND_BLOCK = 16  # units whose bounds the bounded sweep computes at once (and moves after each flip in the block)
_SERIES_MAX_STEP = 0.1  # |step| up to which the increment is log1p(sigmoid(z) (e^step - 1)) (argument above -0.1)


def _softplus_increment_sum(z_from: Tensor, step: Tensor, scratch: Tensor) -> Tensor:
    """sum over the last dimension of softplus(z_from + step) - softplus(z_from), in float64, shaped like the
    batch; z_from and step (same shape) are overwritten, `scratch` (same shape) is used.

    Each term is accurate relative to itself (no cancellation), computed in the inputs' dtype: log1p(sigmoid(
    z_from) (e^step - 1)) when every |step| is at most _SERIES_MAX_STEP (the log1p argument is then above -0.1;
    e^step - 1 from `expm1_`, a short series on the CPU), else the form of `softplus_increment`, sign(step)
    log1p(sigmoid(min(z_from, z_from + step)) (e^|step| - 1)); steps beyond _LOG1P_FORM_MAX_STEP go to
    `softplus_increment` in float64.
    """
    if step.numel() == 0:
        return step.new_zeros(step.shape[:-1], dtype=torch.float64)
    low, high = torch.aminmax(step)
    largest = max(-float(low), float(high))
    if largest > _LOG1P_FORM_MAX_STEP:
        return softplus_increment(z_from.double(), z_from.double() + step.double()).sum(-1)
    if largest <= _SERIES_MAX_STEP:
        terms = expm1_(step, scratch=scratch, largest=largest).mul_(z_from.sigmoid_()).log1p_()
    else:
        torch.minimum(z_from, torch.add(z_from, step, out=scratch), out=z_from).sigmoid_()
        terms = torch.abs(step, out=scratch).expm1_().mul_(z_from).log1p_().copysign_(step)
    # terms accurate relative to themselves: a sum in the inputs' dtype keeps that
    return terms.sum(-1).double()


def _sum_softplus(logits: Tensor, sigmoid_of_minus: Tensor, scratch: Tensor) -> Tensor:
    """sum of softplus(logits) over the last dimension in float64, from sigmoid(-logits) (already computed; scratch:
    a buffer of its shape): -log sigmoid(-a) is a logarithm where softplus is an exponential and a logarithm.
    Where sigmoid(-a) underflowed to 0 (a beyond about 100 in float32) the sum is recomputed with softplus."""
    # summed in the model's dtype: the weight takes this times a step of beta
    total = -torch.log(sigmoid_of_minus, out=scratch).sum(-1).double()
    if not bool(torch.isfinite(total).all()):
        total = F.softplus(logits.double()).sum(-1)
    return total


class DBNSweeps:
    """The sweeps of `DBNPosteriorPath` (its buffers, model and sweep choice are the path's)."""

    def _sweep_(self, l, x, linear, a, p_on, p_off, beta, generator) -> None:
        """Systematic-scan Gibbs over the units of x_l, in place. linear: the logits without the softplus terms of
        the layer below, (N, C, n_l); a, p_on, p_off: that layer's logits and their sigmoids (updated in place
        where a unit flips)."""
        x = x.view(-1, x.shape[-1])
        linear = linear.reshape(x.shape)
        a, p_on, p_off = (t.view(x.shape[0], -1) for t in (a, p_on, p_off))
        route = self.sweep_route(l, x.device)
        if route == "native":
            self._native_sweep_(l, x, linear, p_on, p_off, beta, generator)
        elif route == "bounded":
            self._bounded_sweep_(l, x, linear, a, p_on, p_off, beta, generator)
        else:
            self._full_sweep_(l, x, linear, a, p_on, p_off, beta, generator)

    def sweep_route(self, l: int, device: torch.device) -> str:
        """The sweep that layer l takes on `device`: the requested one, or for "auto" the native kernel on the CPU
        where it compiles and the weights allow, else the bounded sweep on the CPU (it picks rows with indices: on
        a GPU each pick would wait for the host), else the full one."""
        if self.sweep != "auto":
            return self.sweep
        if device.type != "cpu":
            return "full"
        if self._native_plans[l] is not None and native.library() is not None:
            return "native"
        return "bounded" if self._taylor[l] is not None else "full"

    def takes_native_sweep(self, device: torch.device) -> bool:
        """Whether every directed hidden layer's sweep runs in the native kernel on `device`."""
        return all(self.sweep_route(l, device) == "native" for l in range(1, self._L))

    def _native_sweep_(self, l, x, linear, p_on, p_off, beta, generator) -> None:
        """The sweep of `raise_eval.models.native` (dbn_sweep.c: every logit computed exactly, chain by chain in tiles),
        tensors as in `_sweep_`, flattened to (rows, n); p_on and p_off are updated where a unit flips. The
        uniforms are drawn as the bounded sweep draws them, so both see the same thresholds."""
        rows, n_units, n_below = x.shape[0], x.shape[1], p_on.shape[1]
        if not (x.device.type == "cpu" and all(t.is_contiguous() for t in (x, p_on, p_off))):
            raise ValueError("the native sweep runs on contiguous CPU tensors")
        linear = linear.contiguous()
        thresholds = torch.rand(x.shape, generator=generator, dtype=torch.float64, device=x.device).logit_()
        ends, take_log = self._native_plans[l]
        fragile = None
        if self._fragile[l]:
            tiny = torch.finfo(x.dtype).tiny
            fragile = (p_on.lt(tiny) | p_off.lt(tiny)).any(1).to(torch.uint8)
        kernel = getattr(native.library(), "dbn_sweep_float64" if x.dtype == torch.float64 else "dbn_sweep_float32")
        tile = max(1, _NATIVE_TILE_BYTES // (2 * n_below * x.element_size()))
        bias = self.model.biases[l - 1].contiguous()  # held: the kernel reads it through a pointer
        pointers = (x.data_ptr(), linear.data_ptr(), thresholds.data_ptr(), p_on.data_ptr(), p_off.data_ptr(),
                    self._exp_rows[l].data_ptr())  # fmt: skip
        tail = (
            ends.data_ptr(), take_log.data_ptr(), ends.numel(), tile, torch.finfo(x.dtype).tiny,
            0 if fragile is None else fragile.data_ptr(), self._rows[l].data_ptr(), bias.data_ptr(),
        )  # fmt: skip

        def run(begin: int, end: int) -> None:
            kernel(begin, end, n_units, n_below, *pointers, float(beta), *tail)

        # rows are independent: split between threads (ctypes releases the GIL), the same bits for any split
        parts = max(1, min(torch.get_num_threads(), -(-rows // tile)))
        native.run_in_parts(run, [rows * k // parts for k in range(parts + 1)])

    def _full_sweep_(self, l, x, linear, a, p_on, p_off, beta, generator) -> None:
        """The sweep computing every chain's logit exactly; tensors as in `_sweep_`, flattened to (rows, n)."""
        rows, exp_rows = self._rows[l], self._exp_rows[l]
        scale, factors = self._buffer("scale", a), self._buffer("factors", a)
        folds = _fold_views(factors, self._folds[l])
        on_cpu = x.device.type == "cpu"
        for j in range(x.shape[-1]):
            x_j = x[:, j]
            # e^(s w_j) per chain: row 0 (e^w) where x_j = 0 (a flip turns it on), row 1 (e^-w) where x_j = 1
            torch.index_select(exp_rows[j], 0, x_j.long(), out=scale)
            torch.addcmul(p_off, p_on, scale, out=factors)
            log_ratio = _fold_log_sum(*folds)
            sign = 1.0 - 2.0 * x_j
            # softplus(on) - softplus(off) = s * log_ratio
            new = sample_bernoulli_logits_(torch.addcmul(linear[:, j], sign, log_ratio, value=-beta), generator)
            change = new.sub_(x_j)  # +-1 where the unit flipped (= s), else 0
            x_j.add_(change)
            if on_cpu:  # update only the chains that flipped
                idx = torch.nonzero(change).squeeze(-1)
                if idx.numel() > 0:
                    self._flip_rows_(l, j, idx, change.index_select(0, idx), a, p_on, p_off)
            else:  # no host synchronisation per unit: every chain, most of them adding 0
                a.addcmul_(change.unsqueeze(-1), rows[j])
                torch.sigmoid(a, out=p_on)
                torch.neg(a, out=p_off).sigmoid_()

    def _flip_rows_(self, l, j, idx, change, a, p_on, p_off) -> None:
        """Moves the rows `idx` (chains whose unit j of layer l flipped by `change`, +-1) of a, p_on, p_off."""
        moved = a.index_select(0, idx).addcmul_(change.unsqueeze(-1), self._rows[l][j])
        _copy_rows_(a, idx, moved)
        _copy_rows_(p_on, idx, torch.sigmoid(moved))
        _copy_rows_(p_off, idx, moved.neg_().sigmoid_())

    def _recompute_fragile_rows_(self, l, units, idx, moved, fragile, tiny) -> None:
        """Rows `idx` just flipped, their moments updated into `moved` (flipped, 3, n): where a row held or now
        holds a p or 1 - p below `tiny` (a multiplicative update cannot bring an underflowed value back), its
        moments are recomputed from its logits a = x W^T + b, and `fragile` (rows,) is updated for it. units: the
        layer x_l being swept, unit-major (n_l, rows)."""
        suspect = fragile.index_select(0, idx) | moved[:, :2].lt(tiny).flatten(1).any(1)
        where = torch.nonzero(suspect).squeeze(-1)
        if where.numel() == 0:
            return
        rows = idx.index_select(0, where)
        x = units.index_select(1, rows).t().contiguous()  # (len(rows), n_l), as the chain-major layer's rows
        # torch.addmm, not `_below_logits`: a few rows of varying count would each have their product route timed
        a = torch.addmm(self.model.biases[l - 1], x, self._rows[l])
        fresh = moved.new_empty((rows.numel(),) + moved.shape[1:])
        torch.sigmoid(a, out=fresh[:, 0])  # as the state's below_on and below_off are computed
        torch.neg(a, out=fresh[:, 1]).sigmoid_()
        torch.mul(fresh[:, 0], fresh[:, 1], out=fresh[:, 2])
        moved.index_copy_(0, where, fresh)
        fragile.index_copy_(0, rows, fresh[:, :2].lt(tiny).flatten(1).any(1))

    def _bounded_sweep_(self, l, x, linear, a, p_on, p_off, beta, generator) -> None:
        """The sweep with the logits bounded by products, computed exactly only where the bounds leave the draw
        undecided; tensors as in `_sweep_`, flattened to (rows, n).

        With p = sigmoid(a) and s = 1 - 2 x_j, the softplus term of unit j's logit is s G_j, G_j = sum_i
        g_i(s w_ij) with g_i(y) = softplus(a_i + y) - softplus(a_i): g_i(0) = 0, g_i'(0) = p_i, g_i''(0) = p_i (1 -
        p_i) and |g_i'''| = sigma (1 - sigma) |1 - 2 sigma| (a_i + y) <= p_i (1 - p_i) e^|y| on [0, y], so by Taylor
        s G_j = S_j + s Q_j + s R_j with S_j = sum_i p_i w_ij, Q_j = sum_i p_i (1 - p_i) w_ij^2 / 2 and |R_j| <=
        T_j = sum_i p_i (1 - p_i) |w_ij|^3 e^|w_ij| / 6: three products of the chains' moments (p W, and p (1 - p)
        times two fixed matrices). The logit lin_j - beta s G_j lies within beta T_j of c = lin_j - beta (S_j +
        s Q_j). The unit is drawn as 1{l < logit} with l the logit of a uniform: where l falls outside that interval
        (widened by a margin for roundings) the draw is decided, and only the other chains compute G_j. After a
        flip, S, Q and T of the units still to come in the block are moved by the flipped rows' changes of the
        moments (small products).

        Layout: what the sweep reads unit by unit (the layer, its logits without the softplus terms, the uniforms'
        logits) is held unit-major, (n_l, rows), so that a unit's values for all chains are contiguous (column j of
        a chain-major (rows, n_l) tensor is strided: its ops touch a cache line and nearly a page per chain); the
        layer is written back after the sweep. The gathers of the chains that flip or stay undecided go into reused
        buffers (`_rows_buffer`). The bounds only decide which draws are computed exactly, so how they are rounded
        (e.g. the order of a product's sums) does not change the samples, as long as they stay within their margins.
        """
        n_units, n_rows, n_below = x.shape[-1], x.shape[0], a.shape[-1]
        exp_rows, rounding, folds = self._exp_rows[l], self._rounding[l], self._folds[l]
        slopes, taylor = self._rows[l], self._taylor[l].view(-1, n_below)  # (n_l, n), (2 n_l, n): Q's and T's rows
        # The sweep's own copy of p, 1 - p and p (1 - p), interleaved per chain so that the rows of chains that
        # flip move in one gather and one scatter; the state's tensors are recomputed after the sweep. Buffers are
        # kept per layer (a deeper DBN sweeps layers of other widths in turn).
        work = self._buffer(f"sweep rows{l}", a, (n_rows, 3, n_below))
        work[:, 0].copy_(p_on)
        work[:, 1].copy_(p_off)
        torch.mul(p_on, p_off, out=work[:, 2])
        p, pq = work[:, 0], work[:, 2]
        units = self._buffer(f"sweep units{l}", x, (n_units, n_rows)).copy_(x.t())
        lin = self._buffer(f"sweep linear{l}", x, (n_units, n_rows)).copy_(linear.t())
        # logits of uniforms, in float64: thresholds up to +-36 before they saturate (drawn chain-major, as before)
        uniforms = torch.rand(x.shape, generator=generator, dtype=torch.float64, device=x.device)
        thresholds = self._buffer(f"sweep thresholds{l}", uniforms, (n_units, n_rows)).copy_(uniforms.t()).logit_()
        del uniforms
        # Roundings, in units of eps sum_i |coefficients of unit j| (`_rounding`): a product of n terms errs by at
        # most n of them (the block's products, then one per flip in the block for its shift), and the moments
        # carry a few roundings from the sigmoids and from each flip's update (8 a flip, generously). The rest of
        # the interval's computation (c from lin, S and Q) errs by a few eps |lin| plus the same units.
        flips = torch.zeros(n_rows, dtype=x.dtype, device=x.device)
        errors = torch.empty_like(flips)
        tiny = torch.finfo(x.dtype).tiny
        # rows holding a p or 1 - p below the smallest normal number (only where the logits can get there)
        fragile = work[:, :2].lt(tiny).flatten(1).any(1) if self._fragile[l] else None
        slack = torch.abs(lin).mul_(8 * torch.finfo(x.dtype).eps).add_(1e-4)
        for begin in range(0, n_units, _BOUND_BLOCK):
            # S, and (Q, T) side by side, of a block of units for every chain: (rows, block) and (rows, 2 block),
            # chain-major (small enough to stay in the cache when read a column at a time); a flip inside the
            # block moves the rows that flipped
            end = min(begin + _BOUND_BLOCK, n_units)
            slope_sums = torch.mm(p, slopes[begin:end].t())
            taylor_sums = torch.mm(pq, taylor[2 * begin : 2 * end].t())
            torch.add(flips, 1.0, out=errors).mul_(8.0).add_(n_below + 8)
            for j in range(begin, end):
                x_j, k = units[j], j - begin
                second, rest = taylor_sums[:, 2 * k], taylor_sums[:, 2 * k + 1]
                # c = lin - beta S - beta (1 - 2 x) Q
                center = torch.add(lin[j], slope_sums[:, k], alpha=-beta).sub_(second, alpha=beta)
                center.addcmul_(second, x_j, value=2.0 * beta)
                # beta T, widened for the roundings
                half_width = torch.add(slack[j], rest, alpha=beta).add_(errors, alpha=beta * rounding[j])
                low = torch.sub(center, half_width)
                high = center.add_(half_width)
                level = thresholds[j]
                new = (level < low).to(x.dtype)
                undecided = torch.nonzero((level >= low) & (level < high)).squeeze(-1)
                if undecided.numel() > 0:
                    count = undecided.numel()
                    x_u = x_j.index_select(0, undecided)
                    picked = self._rows_buffer(f"undecided{l}", work, count)
                    torch.index_select(work, 0, undecided, out=picked)
                    scale = self._rows_buffer(f"undecided scale{l}", a, count)
                    torch.index_select(exp_rows[j], 0, x_u.long(), out=scale)
                    factors = torch.addcmul(picked[:, 1], picked[:, 0], scale, out=scale)
                    log_ratio = _fold_log_sum(*_fold_views(factors, folds))
                    logit = torch.addcmul(lin[j].index_select(0, undecided), 1.0 - 2.0 * x_u, log_ratio, value=-beta)
                    new.index_copy_(0, undecided, (level.index_select(0, undecided) < logit).to(x.dtype))
                change = new.sub_(x_j)
                x_j.add_(change)
                idx = torch.nonzero(change).squeeze(-1)
                if idx.numel() > 0:
                    count = idx.numel()
                    # a moves by s w: p' = p e^(s w) / F and 1 - p' = (1 - p) / F, F = 1 - p + p e^(s w)
                    before = self._rows_buffer(f"flip before{l}", work, count)
                    torch.index_select(work, 0, idx, out=before)
                    moved = self._rows_buffer(f"flip moved{l}", work, count)
                    turned_off = change.index_select(0, idx).lt(0).long()
                    scale = self._rows_buffer(f"flip scale{l}", a, count)
                    torch.index_select(exp_rows[j], 0, turned_off, out=scale)
                    on = torch.mul(before[:, 0], scale, out=moved[:, 0])
                    factor = torch.add(before[:, 1], on, out=scale)
                    on.div_(factor)
                    off = torch.div(before[:, 1], factor, out=moved[:, 1])
                    torch.mul(on, off, out=moved[:, 2])
                    if fragile is not None:
                        self._recompute_fragile_rows_(l, units, idx, moved, fragile, tiny)
                    _copy_rows_(work, idx, moved)
                    flips.index_add_(0, idx, torch.ones_like(idx, dtype=x.dtype))
                    # the shifts' products (n each, and their sums) and the flip's update of the moments
                    errors.index_add_(0, idx, torch.full_like(idx, n_below + 16, dtype=x.dtype))
                    if j + 1 < end:
                        delta = before[:, 0::2]  # (flipped, 2, n): the changes of p and p (1 - p)
                        torch.sub(moved[:, 0::2], delta, out=delta)
                        # (units to come, flipped) products, read transposed: a third faster than (flipped, units)
                        # with so few columns (any rounding of the bounds is within their margin)
                        slope_sums[:, k + 1 :].index_add_(0, idx, torch.mm(slopes[j + 1 : end], delta[:, 0].t()).t())
                        taylor_sums[:, 2 * k + 2 :].index_add_(
                            0, idx, torch.mm(taylor[2 * j + 2 : 2 * end], delta[:, 1].t()).t()
                        )
        x.copy_(units.t())
