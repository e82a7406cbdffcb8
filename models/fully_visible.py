"""Fully visible pairwise Boltzmann machines: DCA Potts models (categorical sites) and Ising models (spin or 0/1
sites), with no hidden units.

    log f(v) = sum_i h[i, v_i] + sum_{i<j} J[i, v_i, j, v_j]          (categorical: v_i in 0..q-1)
    log f(v) = h . v + sum_{i<j} J_ij v_i v_j                          (spin: v_i in {-1, 1}; bernoulli: {0, 1})

Internally every model is held in the categorical form: a two-state site has fields (n, 2) = h_i s_a and couplings
J[i, a, j, b] = J_ij s_a s_b over its state values s (-1/+1 or 0/1), so that one sampler, one enumeration and one
path serve all three kinds. States in that form are int64 codes 0..q-1 (`codes`).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

SITES = ("categorical", "spin", "bernoulli")
# The state values of the two-state sites, in code order (code 0, code 1).
SITE_VALUES = {"spin": (-1.0, 1.0), "bernoulli": (0.0, 1.0)}


class FullyVisibleModel:
    """A pairwise model over L sites with no hidden units.

    Args:
        fields: categorical: h shaped (L, q); spin / bernoulli: h shaped (n,).
        couplings: categorical: J shaped (L, q, L, q) with J[i, a, j, b] == J[j, b, i, a] and J[i, :, i, :] == 0;
            spin / bernoulli: J shaped (n, n), symmetric with a zero diagonal.
        sites: 'categorical', 'spin' (states -1/+1) or 'bernoulli' (states 0/1).
        alphabet: the q symbols of a categorical site's states in code order (e.g. a protein alphabet), or None.

    Invalid parameters are refused with a ValueError naming the field, before anything is stored.
    """

    family = "fully-visible"

    def __init__(self, fields: Tensor, couplings: Tensor, sites: str = "categorical", alphabet: Optional[str] = None):
        fields, couplings = _as_float_tensor(fields, "fields"), _as_float_tensor(couplings, "couplings")
        _check_parameters(fields, couplings, sites, alphabet)
        self.fields, self.couplings, self.sites, self.alphabet = fields, couplings, sites, alphabet
        self._categorical = None  # (fields (L, q), couplings (L, q, L, q)), built on first use

    # ---------------------------------------------------------------- what the model declares
    @property
    def n_visible(self) -> int:
        """Number of sites L."""
        return int(self.fields.shape[0])

    @property
    def num_states(self) -> int:
        """States per site q (2 for spin and bernoulli sites)."""
        return int(self.fields.shape[1]) if self.sites == "categorical" else 2

    @property
    def dtype(self) -> torch.dtype:
        return self.fields.dtype

    @property
    def device(self) -> torch.device:
        return self.fields.device

    def describe(self) -> str:
        """E.g. 'fully-visible categorical(53x21)' or 'fully-visible spin(1024)'."""
        if self.sites == "categorical":
            return f"fully-visible categorical({self.n_visible}x{self.num_states})"
        return f"fully-visible {self.sites}({self.n_visible})"

    def digest_parts(self) -> tuple[list[Tensor], float]:
        """The tensors and scale that identify the parameters (a resume file's model digest)."""
        return [self.fields, self.couplings], 1.0

    def to(self, device=None, dtype=None) -> FullyVisibleModel:
        """A copy on `device` in `dtype` (floating point)."""
        return FullyVisibleModel(
            self.fields.to(device=device, dtype=dtype), self.couplings.to(device=device, dtype=dtype), self.sites,
            self.alphabet,
        )  # fmt: skip

    # ---------------------------------------------------------------- the categorical form
    def categorical_fields(self, fields: Optional[Tensor] = None) -> Tensor:
        """Fields in the categorical form, shaped (L, q): the model's own, or `fields` given in the model's
        convention ((L, q) categorical, (n,) spin / bernoulli; e.g. a base's)."""
        h = self.fields if fields is None else fields
        if self.sites == "categorical":
            return h
        values = torch.tensor(SITE_VALUES[self.sites], dtype=h.dtype, device=h.device)
        return h.unsqueeze(-1) * values

    def categorical_parameters(self) -> tuple[Tensor, Tensor]:
        """(fields (L, q), couplings (L, q, L, q)) in the categorical form (computed once)."""
        if self._categorical is None:
            if self.sites == "categorical":
                self._categorical = (self.fields, self.couplings)
            else:
                s = torch.tensor(SITE_VALUES[self.sites], dtype=self.dtype, device=self.device)
                coupling = self.couplings[:, None, :, None] * s[None, :, None, None] * s[None, None, None, :]
                self._categorical = (self.categorical_fields(), coupling.contiguous())
        return self._categorical

    def codes(self, v: Tensor, what: str = "v") -> Tensor:
        """The int64 codes 0..q-1 of site states v shaped (*B, L) (categorical: the codes themselves; spin: -1 -> 0,
        +1 -> 1; bernoulli: 0 -> 0, 1 -> 1); a ValueError naming `what` for anything else."""
        self.check_sites(v, what)
        if self.sites == "categorical":
            return v.to(device=self.device, dtype=torch.int64)
        return (v.to(self.device) == SITE_VALUES[self.sites][1]).to(torch.int64)

    def sites_from_codes(self, codes: Tensor) -> Tensor:
        """The site states (the model's convention: int64 codes, or floats -1/+1 or 0/1) of codes (*B, L)."""
        if self.sites == "categorical":
            return codes
        low, high = SITE_VALUES[self.sites]
        return torch.where(codes.bool(), high, low).to(self.dtype)

    def check_sites(self, v: Tensor, what: str = "v") -> None:
        """Refuse (ValueError naming `what`) site states that are not shaped (*B, L) or hold a value outside the
        model's states."""
        if not isinstance(v, Tensor) or v.dim() < 1 or v.shape[-1] != self.n_visible:
            shape = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
            raise ValueError(f"{what} must be shaped (..., {self.n_visible}) (one state per site), got {shape}")
        if self.sites == "categorical":
            if v.is_floating_point() and not bool((v == v.round()).all()):
                raise ValueError(f"{what} must hold integer codes 0..{self.num_states - 1}, found a fraction")
            if v.numel() and not bool(((v >= 0) & (v < self.num_states)).all()):
                raise ValueError(f"{what} must hold integer codes 0..{self.num_states - 1}, found {_bad(v, self)}")
        else:
            low, high = SITE_VALUES[self.sites]
            if v.numel() and not bool(((v == low) | (v == high)).all()):
                raise ValueError(f"{what} must hold {self.sites} states {low:g}/{high:g} only, found {_bad(v, self)}")

    # ---------------------------------------------------------------- densities
    def coupling_input(self, codes: Tensor) -> Tensor:
        """u[..., i, a] = sum_j J[i, a, j, v_j] for codes (*B, L), shaped (*B, L, q) in the model's dtype: the
        local fields less h (J[i, :, i, :] = 0, so a site's own state adds nothing)."""
        _, coupling = self.categorical_parameters()
        size, q = self.n_visible, self.num_states
        one_hot = torch.nn.functional.one_hot(codes, q).to(self.dtype).reshape(*codes.shape[:-1], size * q)
        return (one_hot @ coupling.reshape(size * q, size * q)).reshape(*codes.shape, q)

    def local_fields(self, v: Tensor) -> Tensor:
        """h[i, a] + sum_j J[i, a, j, v_j] for site states v (*B, L), shaped (*B, L, q) (categorical form)."""
        fields, _ = self.categorical_parameters()
        return fields + self.coupling_input(self.codes(v))

    def log_unnormalized_codes(self, codes: Tensor) -> Tensor:
        """log f of codes (*B, L), shaped (*B,), in the model's dtype (no check of the codes)."""
        fields, _ = self.categorical_parameters()
        index = codes.unsqueeze(-1)
        field_term = fields.expand(*codes.shape, self.num_states).gather(-1, index).squeeze(-1).sum(-1)
        pair_term = self.coupling_input(codes).gather(-1, index).squeeze(-1).sum(-1)
        return field_term + 0.5 * pair_term  # every pair i != j counted twice in u

    def log_unnormalized(self, v: Tensor) -> Tensor:
        """log f(v) for site states v shaped (*B, L) (categorical: int64 codes 0..q-1; spin / bernoulli: floats),
        shaped (*B,)."""
        return self.log_unnormalized_codes(self.codes(v))

    def annealed(self, beta: float, base_fields: Tensor) -> FullyVisibleModel:
        """The point at `beta` of the geometric path from the independent-site base with fields `base_fields` (the
        model's convention): fields (1 - beta) c + beta h, couplings beta J."""
        c = base_fields.to(dtype=self.dtype, device=self.device)
        return FullyVisibleModel((1 - beta) * c + beta * self.fields, beta * self.couplings, self.sites, self.alphabet)


def _as_float_tensor(x, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        try:
            x = torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError) as error:
            raise ValueError(f"{name} must be a tensor of numbers ({error})") from None
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    return x


def _check_parameters(fields: Tensor, couplings: Tensor, sites: str, alphabet: Optional[str]) -> None:
    """Refuse invalid parameters with a one-line ValueError naming the field (see `FullyVisibleModel`)."""
    if sites not in SITES:
        raise ValueError(f"sites must be one of {', '.join(SITES)}, got {sites!r}")
    if sites == "categorical":
        if fields.dim() != 2 or fields.shape[0] < 1 or fields.shape[1] < 2:
            raise ValueError(
                f"fields of categorical sites must be shaped (L, q) with q >= 2, got {tuple(fields.shape)}"
            )
        size, q = fields.shape
        if tuple(couplings.shape) != (size, q, size, q):
            raise ValueError(
                f"couplings of categorical sites must be shaped (L, q, L, q) = {(size, q, size, q)}, "
                f"got {tuple(couplings.shape)}"
            )
    else:
        if fields.dim() != 1 or fields.shape[0] < 1:
            raise ValueError(f"fields of {sites} sites must be shaped (n,), got {tuple(fields.shape)}")
        size = fields.shape[0]
        if tuple(couplings.shape) != (size, size):
            raise ValueError(
                f"couplings of {sites} sites must be shaped (n, n) = {(size, size)}, got {tuple(couplings.shape)}"
            )
    if fields.device != couplings.device or fields.dtype != couplings.dtype:
        raise ValueError(
            f"fields ({fields.dtype}, {fields.device}) and couplings ({couplings.dtype}, {couplings.device}) "
            "must share a dtype and device"
        )
    for name, x in (("fields", fields), ("couplings", couplings)):
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} hold {int((~torch.isfinite(x)).sum())} NaN or infinite entries")
    if sites == "categorical":
        self_couplings = couplings.diagonal(dim1=0, dim2=2)  # (q, q, L): J[i, :, i, :]
        transposed = couplings.permute(2, 3, 0, 1)
        where = "J[i, :, i, :]"
        symmetry = "J[i, a, j, b] == J[j, b, i, a]"
    else:
        self_couplings = couplings.diagonal()
        transposed = couplings.t()
        where = "the diagonal J[i, i]"
        symmetry = "J == J.T"
    if bool((self_couplings != 0).any()):
        raise ValueError(
            f"couplings must have no self-couplings: {where} must be zero (put a site's own terms in fields)"
        )
    asymmetry = float((couplings - transposed).abs().max()) if couplings.numel() else 0.0
    scale = float(couplings.abs().max()) if couplings.numel() else 0.0
    if asymmetry > 8 * torch.finfo(couplings.dtype).eps * max(scale, 1.0):
        raise ValueError(f"couplings must be symmetric ({symmetry}); the largest difference is {asymmetry:.3g}")
    if alphabet is not None:
        if sites != "categorical":
            raise ValueError(f"alphabet applies to categorical sites only, not to {sites} sites")
        q = fields.shape[1]
        if not isinstance(alphabet, str) or len(alphabet) != q or len(set(alphabet)) != q:
            raise ValueError(f"alphabet must be a string of q = {q} distinct symbols, got {alphabet!r}")


def _bad(v: Tensor, model: FullyVisibleModel) -> str:
    """The first value of v outside the model's states, for an error message."""
    if model.sites == "categorical":
        bad = v[(v < 0) | (v >= model.num_states)]
    else:
        low, high = SITE_VALUES[model.sites]
        bad = v[(v != low) & (v != high)]
    return f"{bad.flatten()[0].item():g}" if bad.numel() else "?"


def log_sum_exp_fields(fields: Tensor) -> float:
    """log of the normalizer of independent sites with categorical fields (L, q): sum_i logsumexp_a c[i, a]."""
    return float(torch.logsumexp(fields.double(), dim=-1).sum())


__all__ = ["SITES", "SITE_VALUES", "FullyVisibleModel", "log_sum_exp_fields"]
