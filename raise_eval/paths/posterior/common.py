"""What the DBM and DBN posterior paths share: the accurate softplus increment."""

from __future__ import annotations

import torch
from torch import Tensor

# Below this |logit step| the increment softplus(z + d) - softplus(z) is taken as log1p(sigmoid(z) expm1(d))
# (accurate for small d); above it the plain difference has no cancellation to fear and expm1 could overflow.
_LOG1P_FORM_MAX_STEP = 30.0


def softplus_increment(z_from: Tensor, z_to: Tensor) -> Tensor:
    """softplus(z_to) - softplus(z_from) elementwise, accurate when the two are close (any shape, any float dtype).

    With lo = min(z_from, z_to) and a = |z_to - z_from|, softplus(lo + a) - softplus(lo) = log1p(sigmoid(lo)
    expm1(a)): no difference of two nearly equal numbers, and the log1p argument is non-negative.
    """
    step = z_to - z_from
    a = step.abs()
    lo = torch.minimum(z_from, z_to)
    small = torch.log1p(torch.sigmoid(lo) * torch.expm1(a.clamp(max=_LOG1P_FORM_MAX_STEP)))
    small = torch.where(step >= 0, small, -small)
    # logaddexp(x, 0): softplus without F.softplus's switch to x above 20 (an error up to e^-20 there)
    zero = z_to.new_zeros(())
    return torch.where(a <= _LOG1P_FORM_MAX_STEP, small, torch.logaddexp(z_to, zero) - torch.logaddexp(z_from, zero))
