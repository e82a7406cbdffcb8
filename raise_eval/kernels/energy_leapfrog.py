"""The native route of an HMC transition on an energy model (`kernels.energy_hmc.hmc_transition`): the elementwise
work around the energy's L forward and backward passes in L + 1 passes of one C kernel (`models/native`'s
"energy_leapfrog": each fuses the momentum update with the base's gradient, the position update and the reflection
at a box's walls; the first and last also sum the momenta's squares and the base's standard scores for the
acceptance test), where eager PyTorch makes about ten per leapfrog step and twenty more at the ends.

It draws the same random numbers in the same order and does the same arithmetic as the PyTorch route (sums in
double may differ in their last bits), so the two give the same transition. Taken for float32 and float64 chains on
the CPU whose path's base is a `GaussianBase` (the geometric path's density, as `EnergyPath`'s), with one step size
per chain (or one in all), where the kernel compiled and RAISE_EVAL_NATIVE is not 0; `native_transition` returns
None elsewhere and the PyTorch route runs.
"""

from __future__ import annotations

import ctypes
import math
from typing import Optional

import torch
from torch import Tensor

from raise_eval.contracts import KernelInfo
from raise_eval.kernels.energy_state import EnergyState, non_finite_share
from raise_eval.models import native
from raise_eval.models.energy import GaussianBase

COORDINATES_PER_THREAD = 16384  # a pass splits its rows over threads only where each gets this many (a hand-off costs)


def leapfrog_library(x: Tensor, path):
    """The compiled kernel where the native route applies to chains x on `path`, else None."""
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64) or type(path.base) is not GaussianBase:
        return None
    return native.library("energy_leapfrog")


class _Pass:
    """The kernel's calls for one transition: the chains' rows, the base's terms and the step sizes in x's dtype."""

    def __init__(self, lib, path, x: Tensor, step_size: Tensor, beta: float):
        base, event_dims = path.base, len(path.model.event_shape)
        self.dim = math.prod(path.model.event_shape)
        self.rows = x.numel() // self.dim
        self.fn = getattr(lib, "energy_leapfrog_float32" if x.dtype == torch.float32 else "energy_leapfrog_float64")
        # the base's constants, converted once per dtype (`GaussianBase.pass_terms`), not at every transition
        self.mean, precision, std, self.mean64, self.inverse_std64 = base.pass_terms(x.dtype, x.device)
        # the base's gradient weight (1 - beta) / std^2 as GaussianBase.grad_log_prob rounds it
        self.base_weight = precision if 1 - beta == 1.0 else precision * (1 - beta)
        scale = path.step_scale()
        self.scale = std if scale is base.std else scale.to(dtype=x.dtype).contiguous()
        batch = x.shape[: x.dim() - event_dims]
        eps = step_size.to(dtype=x.dtype)
        if eps.numel() == 1:
            self.eps, self.eps_stride = eps.reshape(1).contiguous(), 0
        else:  # one step size per chain (broadcast over the batch), shaped like the event's leading ones
            self.eps = eps.reshape(eps.shape[: eps.dim() - event_dims]).expand(batch).contiguous().reshape(-1)
            self.eps_stride = 1
        support = path.model.support
        self.bounded = bool(support.bounded)
        self.low, self.high = (support.low, support.high) if self.bounded else (-math.inf, math.inf)
        self.beta = float(beta)
        threads = max(1, min(torch.get_num_threads(), x.numel() // COORDINATES_PER_THREAD))
        self.bounds = native.split_rows(self.rows, threads)
        # the arguments that stay for the transition, as ctypes objects (converted once, not at every pass)
        pointer, double = ctypes.c_void_p, ctypes.c_double
        self.fixed = {
            "terms": [pointer(t.data_ptr()) for t in (self.mean, self.base_weight, self.eps)],
            "step": [ctypes.c_int64(self.eps_stride), pointer(self.scale.data_ptr()), double(self.beta)],
            "box": [double(self.low), double(self.high), pointer(self.mean64.data_ptr())],
            "base": pointer(self.inverse_std64.data_ptr()),
        }

    def __call__(self, x_in, x_out, p_in, p_out, grad, half: float, moving: bool, sums: dict) -> None:
        """One pass (see energy_leapfrog.c); `sums`: the per-row outputs wanted (square_in, square_out, base_sum,
        base_outside), float64 / int64 (rows,)."""
        flags = (1 if moving else 0) | (2 if self.bounded else 0)
        fixed = self.fixed
        args = [t.data_ptr() for t in (x_in, x_out, p_in, p_out, grad)] + fixed["terms"] + fixed["step"]
        args += [half, flags] + fixed["box"] + [fixed["base"]]
        args += [sums[k].data_ptr() if k in sums else None for k in ("square_in", "square_out", "base_sum")]
        args.append(sums["base_outside"].data_ptr() if "base_outside" in sums else None)
        if len(self.bounds) == 2:
            self.fn(self.bounds[0], self.bounds[1], self.dim, *args)
            return
        native.run_in_parts(lambda begin, end: self.fn(begin, end, self.dim, *args), self.bounds)


def _log_base(path, base_sum: Tensor, outside: Tensor, batch) -> Tensor:
    """log p_0 from the kernel's sums of squared standard scores, float64 (*B,) (-inf outside the box)."""
    out = base_sum.mul(-0.5).sub_(path.base.log_normalizer)
    if path.model.support.bounded:
        out = out.masked_fill_(outside > 0, -math.inf)
    return out.reshape(batch)


def _log_accept_apart(path, beta: float, log_f_new: Tensor, log_f_old: Tensor, start: dict, end: dict,
                      batch) -> Tensor:
    """log of the acceptance ratio, H_0 - H_L, float64 (*B,), from the kernel's sums at the trajectory's ends, the
    two log densities and kinetic energies taken apart (-inf where a chain is outside the box), as the PyTorch route
    does: for a transition with a chain outside the box at either end, which reflection leaves none in practice
    (every other transition's test is `hmc_finish`'s, in one call)."""
    log_new = (1 - beta) * _log_base(path, end["base_sum"], end["base_outside"], batch) + beta * log_f_new
    log_old = (1 - beta) * _log_base(path, start["base_sum"], start["base_outside"], batch) + beta * log_f_old
    kinetic_new, kinetic_old = 0.5 * end["square_out"].reshape(batch), 0.5 * start["square_in"].reshape(batch)
    return (log_new - kinetic_new) - (log_old - kinetic_old)


def _per_chain(step_size: Tensor, event_dims: int) -> bool:
    """Whether the step sizes are one per chain (or one in all), as the kernel takes them: size 1 along the event's
    dimensions (step sizes that vary over the coordinates, which `hmc_transition` also takes, go by PyTorch)."""
    return step_size.numel() == 1 or (
        step_size.dim() >= event_dims and all(n == 1 for n in step_size.shape[step_size.dim() - event_dims :])
    )


def native_transition(
    path, state: EnergyState, beta: float, step_size: Tensor, num_leapfrog: int, generator: torch.Generator
) -> Optional[tuple[EnergyState, KernelInfo]]:
    """`hmc_transition` by the native kernel, or None where it does not apply (see the module docstring)."""
    lib = leapfrog_library(state.x, path)
    if lib is None or not _per_chain(step_size, len(path.model.event_shape)):
        return None
    state = path.with_grad(state)
    x0, g0 = state.x.contiguous(), state.grad.to(state.x.dtype).contiguous()
    if g0.shape != x0.shape:
        return None
    kernel = _Pass(lib, path, x0, step_size, beta)
    batch = x0.shape[: x0.dim() - len(path.model.event_shape)]
    p0 = torch.randn(x0.shape, generator=generator, dtype=x0.dtype, device=x0.device)
    x, p = torch.empty_like(x0), torch.empty_like(p0)
    start = {k: torch.empty(kernel.rows, dtype=torch.float64) for k in ("square_in", "base_sum")}
    start["base_outside"] = torch.empty(kernel.rows, dtype=torch.int64)
    end = {k: torch.empty(kernel.rows, dtype=torch.float64) for k in ("square_out", "base_sum")}
    end["base_outside"] = torch.empty(kernel.rows, dtype=torch.int64)
    kernel(x0, x, p0, p, g0, 0.5, True, start)
    # p0 is done with (its squares are summed), and each step's gradient once the pass has read it: freed before
    # the next energy pass, so that its buffers are reused while still in cache rather than new ones taken
    del p0
    for i in range(num_leapfrog):  # at least one (`hmc_transition` refuses fewer)
        new = grad = None
        new = path.state_with_grad(x)
        grad = new.grad
        if grad.dtype != x.dtype or not grad.is_contiguous():
            grad = grad.to(x.dtype).contiguous()
        last = i == num_leapfrog - 1
        kernel(x, x, p, p, grad, 0.5 if last else 1.0, not last, end if last else {})
    new = new._replace(grad=grad)
    row_bytes = kernel.dim * x.element_size()
    if not (path.model.support.bounded and bool((start["base_outside"] | end["base_outside"]).any())):
        # every chain inside the box (always, after reflection): the test in one call of the kernel's `hmc_finish`
        u = torch.rand(batch, generator=generator, dtype=torch.float64, device=x.device)
        log_u = torch.log(u)  # torch's log, as the PyTorch route's decisions take it
        log_f_new, log_f_old = (t.to(torch.float64).contiguous() for t in (new.log_f, state.log_f))  # read as doubles
        out = torch.empty((3, kernel.rows), dtype=torch.float64)  # log f chosen, acceptance, non-finite
        # the chosen gradient in a buffer of its own: the energy's backward may return one that it (or a hook of the
        # user's) keeps, so the proposal's is never written to
        grad = torch.empty_like(new.grad)
        lib.hmc_finish(kernel.rows, row_bytes, float(beta), *(t.data_ptr() for t in (
            log_f_new, log_f_old, start["base_sum"], end["base_sum"], start["square_in"], end["square_out"], log_u,
            x, x0, grad, new.grad, g0, out[0], out[1], out[2])))  # fmt: skip
        chosen = EnergyState(x, out[0].reshape(batch), grad)
        return chosen, KernelInfo(acceptance=out[1].reshape(batch), non_finite=out[2].reshape(batch))
    log_accept = _log_accept_apart(path, beta, new.log_f, state.log_f, start, end, batch)
    non_finite = non_finite_share(log_accept)
    log_accept = torch.nan_to_num(log_accept, nan=-math.inf, posinf=-math.inf)  # divergent trajectories: rejected
    u = torch.rand(log_accept.shape, generator=generator, dtype=torch.float64, device=log_accept.device)
    accept = torch.log(u) < log_accept
    flags = accept.contiguous().view(torch.uint8)
    lib.select_rows(kernel.rows, row_bytes, flags.data_ptr(), x.data_ptr(), x0.data_ptr(), x.data_ptr())
    grad = torch.empty_like(new.grad)
    lib.select_rows(kernel.rows, row_bytes, flags.data_ptr(), new.grad.data_ptr(), g0.data_ptr(), grad.data_ptr())
    chosen = EnergyState(x, torch.where(accept, new.log_f, state.log_f), grad)
    return chosen, KernelInfo(acceptance=log_accept.clamp(max=0.0).exp(), non_finite=non_finite)
