"""The geometric path of a fully visible pairwise model (`FullyVisibleModel`: DCA Potts, Ising) from an
independent-site base.

f_beta(v) = f_base(v)^(1 - beta) f(v)^beta, f_base(v) = exp(sum_i c[i, v_i]): fields (1 - beta) c + beta h and
couplings beta J (`FullyVisibleModel.annealed`). The base's normalizer is closed form,
log Z_0 = sum_i log sum_a exp(c[i, a]), and it is sampled exactly site by site. The state is the int64 codes of the
sites shaped (*B, L) (`FullyVisibleModel.codes`); the kernel is the palindromic single-site scan of
`kernels.site_gibbs` (reversible, so RAISE's reverse pass is the exact reversal of the forward chain). RAISE starts
from the test vector itself: with no hidden units its start weight is f(v) / Z_0.

Bases (fields in the model's convention: (L, q) categorical, (n,) spin / bernoulli): `uniform_fields` (zeros) and
`data_base_fields` (each site's state frequencies in the training data, `site_frequencies`, with a pseudocount:
`base_fields_from_frequencies`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch
from torch import Tensor

from raise_eval.kernels.site_gibbs import CouplingTables, site_scan
from raise_eval.kernels.site_program import SiteScanProgram
from raise_eval.models.fully_visible import SITE_VALUES, FullyVisibleModel, log_sum_exp_fields


def uniform_fields(model: FullyVisibleModel) -> Tensor:
    """Fields of the uniform base (zeros, in the model's convention)."""
    return torch.zeros_like(model.fields)


def site_frequencies(model: FullyVisibleModel, train_data: Tensor) -> Tensor:
    """Each site's state frequencies in the training data, float64 shaped (L, q) (codes in the model's order:
    spin -1/+1 and bernoulli 0/1 are codes 0/1): what `data_base_fields` fits the base to, and an evaluation's
    `train_pixel_means` for a fully visible model (`raise_eval.visible_statistics(model, train_data)`).

    Args:
        train_data: site states shaped (N, L) (categorical: integer codes; spin / bernoulli: -1/+1 or 0/1).
    """
    if not isinstance(train_data, Tensor) or train_data.dim() != 2:
        shape = tuple(train_data.shape) if isinstance(train_data, Tensor) else type(train_data).__name__
        raise ValueError(f"base fields need training data shaped (N, {model.n_visible}), got {shape}")
    if train_data.shape[0] == 0:
        raise ValueError("base fields need at least one training vector")
    codes = model.codes(train_data, "training data")
    return torch.nn.functional.one_hot(codes, model.num_states).double().mean(0)


def base_fields_from_frequencies(model: FullyVisibleModel, frequencies: Tensor, pseudocount: float = 1e-3) -> Tensor:
    """Fields of the independent-site base with each site's state frequencies mixed with the uniform,
    f_i(a) = (1 - pseudocount) * frequencies[i, a] + pseudocount / q, so that states never seen get finite fields.
    Categorical: c[i, a] = log f_i(a), shaped (L, q); spin: c_i = log(f_i(+1) / f_i(-1)) / 2 and bernoulli:
    c_i = log(f_i(1) / f_i(0)), shaped (n,). In the model's dtype and device.

    Args:
        frequencies: (L, q), each row a distribution over the site's states (`site_frequencies`).
        pseudocount: in (0, 1).
    """
    if not 0 < pseudocount < 1:
        raise ValueError(f"pseudocount must be in (0, 1), got {pseudocount}")
    size, q = model.n_visible, model.num_states
    freq = torch.as_tensor(frequencies, dtype=torch.float64).to(model.device)
    if tuple(freq.shape) != (size, q):
        raise ValueError(
            f"site frequencies must be shaped (L, q) = {(size, q)} (each site's state frequencies in the training "
            f"data: raise_eval.visible_statistics(model, train_data)), got {tuple(freq.shape)}"
        )
    if not bool(((freq >= 0) & (freq <= 1)).all()) or not torch.allclose(freq.sum(1), torch.ones_like(freq[:, 0])):
        raise ValueError("site frequencies must be in [0, 1], each site's summing to 1 (or NaN was found)")
    log_freq = torch.log((1 - pseudocount) * freq + pseudocount / q)
    if model.sites == "categorical":
        fields = log_freq
    else:
        low, high = SITE_VALUES[model.sites]
        fields = (log_freq[:, 1] - log_freq[:, 0]) / (high - low)
    return fields.to(dtype=model.dtype)


def data_base_fields(model: FullyVisibleModel, train_data: Tensor, pseudocount: float = 1e-3) -> Tensor:
    """Fields of the independent-site base fitted to training data (`base_fields_from_frequencies` of their
    `site_frequencies`); train_data: site states shaped (N, L)."""
    if not 0 < pseudocount < 1:
        raise ValueError(f"pseudocount must be in (0, 1), got {pseudocount}")
    return base_fields_from_frequencies(model, site_frequencies(model, train_data), pseudocount)


def chains_at_test_vectors(path, codes: Tensor, data: Tensor, num_chains: int, what: str) -> tuple[Tensor, Tensor]:
    """RAISE's start of a fully visible path (this one or a trajectory's) at the test vectors' site codes (N, L):
    (num_chains copies of each, (N, num_chains, L), log f(v) under the target, float64 (N,)). ValueError naming
    `what` when the data are not one batch of vectors."""
    if codes.dim() != 2:
        raise ValueError(f"{what} must be shaped (N, {path.model.n_visible}), got {tuple(data.shape)}")
    state = codes.unsqueeze(1).expand(codes.shape[0], num_chains, codes.shape[1]).contiguous()
    return state, path.log_density(codes, 1.0)


class FullyVisiblePath:
    """Geometric path from an independent-site base (beta = 0) to a fully visible model (beta = 1).

    Args:
        model: the target `FullyVisibleModel`.
        base_fields: the base's fields in the model's convention ((L, q) categorical, (n,) spin / bernoulli), or a
            one-element sequence holding them (`base_biases`); uniform when None.
        method: the kernel's single-site update, 'gibbs' (default) or 'metropolis'.
    """

    def __init__(self, model: FullyVisibleModel, base_fields=None, method: str = "gibbs"):
        base = uniform_fields(model) if base_fields is None else base_fields
        if isinstance(base, (list, tuple)):
            if len(base) != 1:
                raise ValueError(f"a fully visible model's base has one field tensor, got {len(base)}")
            base = base[0]
        base = torch.as_tensor(base)
        if tuple(base.shape) != tuple(model.fields.shape):
            raise ValueError(
                f"base fields have shape {tuple(base.shape)}, the model's fields {tuple(model.fields.shape)}"
            )
        if not bool(torch.isfinite(base).all()):
            raise ValueError("base fields have NaN or infinite entries")
        if method not in ("gibbs", "metropolis"):
            raise ValueError(f"method must be one of gibbs, metropolis, got {method!r}")
        self.model = model
        self.method = method
        self.base_biases = [base.to(dtype=model.dtype, device=model.device)]
        self.clamped = ()
        self._base_categorical = model.categorical_fields(self.base_biases[0])  # (L, q)
        self._coupling_tables: Optional[CouplingTables] = None

    # ---------------------------------------------------------------- the base
    @property
    def log_partition_initial(self) -> float:
        """log Z_0 of the base, float64: sum_i logsumexp_a c[i, a]."""
        return log_sum_exp_fields(self._base_categorical)

    def sample_initial(self, num_chains: int, generator: torch.Generator) -> Tensor:
        """`num_chains` exact samples of the base, int64 codes shaped (num_chains, L)."""
        return self.sample_base((num_chains,), generator)

    def sample_base(self, batch_shape: tuple, generator: torch.Generator) -> Tensor:
        """Exact samples of the base, int64 codes shaped (*batch_shape, L)."""
        probs = torch.softmax(self._base_categorical.double(), dim=-1)  # (L, q)
        cdf = probs.cumsum(-1)
        u = torch.rand((*batch_shape, probs.shape[0]), generator=generator, device=probs.device, dtype=torch.float64)
        return (cdf[:, :-1] < (u * cdf[:, -1]).unsqueeze(-1)).sum(-1)

    def log_base_prob(self, codes: Tensor) -> Tensor:
        """log p_0(v) of codes (*B, L) under the base, float64 shaped (*B,)."""
        log_p = torch.log_softmax(self._base_categorical.double(), dim=-1)
        return log_p.expand(*codes.shape, log_p.shape[-1]).gather(-1, codes.unsqueeze(-1)).squeeze(-1).sum(-1)

    # ---------------------------------------------------------------- states
    def state_from_sites(self, v: Tensor, what: str = "v") -> Tensor:
        """The state (int64 codes (*B, L)) of site states v in the model's convention (checked, naming `what`)."""
        return self.model.codes(v, what)

    def sites(self, state: Tensor) -> Tensor:
        """The site states (the model's convention) of a state."""
        return self.model.sites_from_codes(state)

    def test_vector_start(self, data: Tensor, num_chains: int, what: str = "test data") -> tuple[Tensor, Tensor]:
        """RAISE's start at the test vectors themselves (no hidden units): (codes with batch (N, num_chains), log f(v)
        float64 (N,)). data: site states (N, L) in the model's convention."""
        return chains_at_test_vectors(self, self.state_from_sites(data, what), data, num_chains, what)

    def clone_state(self, state: Tensor) -> Tensor:
        return state.clone()

    def state_from_record(self, record: dict) -> Tensor:
        """The state a resume file kept (`contracts.ResumableState`): the site codes, its only layer."""
        return record["layers"][0].to(device=self.model.device, dtype=torch.int64)

    def with_clamped(self, clamped) -> FullyVisiblePath:
        """A fresh copy of this path (its own caches), e.g. for a pilot or a timing; a fully visible model has no
        layers to clamp."""
        if tuple(clamped):
            raise ValueError(f"a fully visible model has no layers to clamp, got clamped={tuple(clamped)}")
        return FullyVisiblePath(self.model, self.base_biases, self.method)

    # ---------------------------------------------------------------- densities and kernel
    def at(self, beta: float) -> FullyVisibleModel:
        """The model at inverse temperature `beta`."""
        return self.model.annealed(beta, self.base_biases[0])

    def _log_f_and_base(self, state: Tensor) -> tuple[Tensor, Tensor]:
        base = self._base_categorical.expand(*state.shape, self._base_categorical.shape[-1])
        log_base = base.gather(-1, state.unsqueeze(-1)).squeeze(-1).sum(-1)
        return self.model.log_unnormalized_codes(state).double(), log_base.double()

    def log_density(self, state: Tensor, beta: float) -> Tensor:
        """log f_beta(v) = (1 - beta) log f_base(v) + beta log f(v), float64 shaped (*B,)."""
        log_f, log_base = self._log_f_and_base(state)
        return (1 - beta) * log_base + beta * log_f

    def log_density_ratio(self, state: Tensor, beta_from: float, beta_to: float) -> Tensor:
        """log f_{beta_to}(v) - log f_{beta_from}(v) = (beta_to - beta_from) (log f(v) - log f_base(v)), float64
        shaped (*B,)."""
        log_f, log_base = self._log_f_and_base(state)
        return (beta_to - beta_from) * (log_f - log_base)

    def log_density_derivative(self, state: Tensor, beta: float) -> Tensor:
        """d log f_beta(v) / d beta = log f(v) - log f_base(v) (the path is geometric: the same at every beta),
        float64 shaped (*B,): what thermodynamic integration integrates."""
        log_f, log_base = self._log_f_and_base(state)
        return log_f - log_base

    def site_parameters(self, beta: float) -> tuple[Tensor, CouplingTables, float]:
        """(fields (L, q) at beta, the couplings as `CouplingTables`, their scale beta): f_beta in the kernel's
        terms."""
        fields, _ = self.model.categorical_parameters()
        return (1 - beta) * self._base_categorical + beta * fields, self.coupling_tables(), float(beta)

    def coupling_tables(self) -> CouplingTables:
        """The kernel's per-site tables of the couplings (`kernels.site_gibbs.CouplingTables`), built once."""
        if self._coupling_tables is None:
            self._coupling_tables = CouplingTables(self.model.categorical_parameters()[1])
        return self._coupling_tables

    def transition(self, state: Tensor, beta: float, generator: torch.Generator) -> Tensor:
        """One palindromic single-site scan at `beta` (reversible, leaves p_beta invariant); `state` is not
        modified."""
        fields, tables, scale = self.site_parameters(beta)
        return site_scan(state, fields, tables, scale, generator, self.method)[0]

    def step_program(self, options) -> Optional[SiteScanProgram]:
        """The scan and weight update as a `kernels.site_program.SiteScanProgram` where `options`
        (`step_programs.LoopOptions`) run step programs on the model's device (CUDA by default), else None. The
        programs' product and fusion options have nothing to change here: the scan has no matrix products and its
        updates are not fused."""
        if not options.runs_on(self.model.device):
            return None
        return SiteScanProgram(self)


def fully_visible_path(
    model: FullyVisibleModel, base_biases: Optional[Sequence[Tensor]] = None, clamped: Sequence[int] = ()
) -> FullyVisiblePath:
    """`make_path` for the 'fully-visible' family: no layers to clamp."""
    if tuple(clamped):
        raise ValueError(f"a fully visible model has no layers to clamp, got clamped={tuple(clamped)}")
    return FullyVisiblePath(model, base_biases)
