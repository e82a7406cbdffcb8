"""Exact answers for small models, by enumeration: ground truth for every estimator test.

- `log_partition`: log Z, enumerating whichever parity group of layers (even or odd) has fewer units and
  summing the other out analytically; for an RBM, the smaller layer (up to about 25 units).
- `log_unnormalized_visible` / `log_likelihood`: log f(v) and log p(v).
- `annealing_model_marginal`: p_ann(v), the distribution of the visible state after the forward annealing chain
  x_0 ~ p_0, x_k ~ T_k(. | x_{k-1}) (k = 1..K) with the collapsed block-Gibbs kernel, computed by propagating
  p_0 through exact transition matrices built from the energy alone. RAISE is unbiased for this quantity.

Everything is computed in float64 from `log_unnormalized_joint` / `log_unnormalized_marginal`, never from the
samplers, so these functions check the kernels rather than repeat them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from models.boltzmann.layered import LayeredBoltzmannMachine

DEFAULT_MAX_UNITS = 25


def binary_configurations(
    n: int, start: int = 0, stop: int | None = None, *, dtype=torch.float64, device=None
) -> Tensor:
    """Rows are the binary codes of the integers start..stop-1 (bit j = column j), shaped (stop - start, n)."""
    stop = 2**n if stop is None else stop
    codes = torch.arange(start, stop, device=device, dtype=torch.int64)
    bits = torch.arange(n, device=device, dtype=torch.int64)
    return ((codes.unsqueeze(-1) >> bits) & 1).to(dtype)


def configuration_index(x: Tensor) -> Tensor:
    """Integer code sum_j x_j 2^j of binary vectors x shaped (*batch, n), as int64 shaped (*batch,)."""
    weights = 2 ** torch.arange(x.shape[-1], device=x.device, dtype=torch.int64)
    return (x.round().to(torch.int64) * weights).sum(-1)


def _groups(model: LayeredBoltzmannMachine) -> tuple[list[int], list[int]]:
    even = list(range(0, model.num_layers, 2))
    odd = list(range(1, model.num_layers, 2))
    return even, odd


def _split(config: Tensor, layer_ids: Sequence[int], sizes: Sequence[int]) -> dict[int, Tensor]:
    out, start = {}, 0
    for l in layer_ids:
        out[l] = config[..., start : start + sizes[l]]
        start += sizes[l]
    return out


def _check_units(units: int, max_units: int, what: str) -> None:
    if units > max_units:
        raise ValueError(
            f"exact {what} would enumerate 2^{units} configurations (limit 2^{max_units}); "
            "use AIS/RAISE, or raise max_units if you really want to wait"
        )


def log_partition(
    model: LayeredBoltzmannMachine, *, max_units: int = DEFAULT_MAX_UNITS, chunk_size: int = 2**14
) -> float:
    """Exact log Z in float64, enumerating the parity group (even or odd layers) with fewer units."""
    m = model.to(dtype=torch.float64)
    sizes = m.layer_sizes
    even, odd = _groups(m)
    group = min((even, odd), key=lambda g: sum(sizes[l] for l in g))
    units = sum(sizes[l] for l in group)
    _check_units(units, max_units, "log Z")
    partial = []
    for start in range(0, 2**units, chunk_size):
        config = binary_configurations(units, start, min(start + chunk_size, 2**units), device=m.device)
        parts = _split(config, group, sizes)
        layers = [parts.get(l) for l in range(m.num_layers)]
        partial.append(torch.logsumexp(m.log_unnormalized_marginal(layers), dim=0))
    return float(torch.logsumexp(torch.stack(partial), dim=0))


def log_unnormalized_visible(
    model: LayeredBoltzmannMachine, v: Tensor, *, max_units: int = DEFAULT_MAX_UNITS, chunk_size: int = 2**12
) -> Tensor:
    """Exact log f(v) = log sum_{hidden} f(v, hidden) in float64, shaped (*batch,) for v shaped (*batch, n_visible).

    Odd layers are summed out analytically; even hidden layers (x_2, x_4, ...) are enumerated.
    """
    m = model.to(dtype=torch.float64)
    v = v.to(dtype=torch.float64, device=m.device)
    sizes = m.layer_sizes
    hidden_even = list(range(2, m.num_layers, 2))
    units = sum(sizes[l] for l in hidden_even)
    if units == 0:
        return m.log_unnormalized_marginal([v] + [None] * (m.num_layers - 1))
    _check_units(units, max_units, "log f(v)")
    batch = v.shape[:-1]
    v_flat = v.reshape(-1, 1, sizes[0])
    partial = []
    for start in range(0, 2**units, chunk_size):
        config = binary_configurations(units, start, min(start + chunk_size, 2**units), device=m.device)
        parts = _split(config, hidden_even, sizes)
        c = config.shape[0]
        layers = [v_flat.expand(-1, c, -1)]
        for l in range(1, m.num_layers):
            layers.append(parts[l].unsqueeze(0).expand(v_flat.shape[0], -1, -1) if l in parts else None)
        partial.append(torch.logsumexp(m.log_unnormalized_marginal(layers), dim=1))
    return torch.logsumexp(torch.stack(partial), dim=0).reshape(batch)


def log_likelihood(model: LayeredBoltzmannMachine, v: Tensor, *, max_units: int = DEFAULT_MAX_UNITS) -> Tensor:
    """Exact log p(v) = log f(v) - log Z in float64, shaped (*batch,)."""
    return log_unnormalized_visible(model, v, max_units=max_units) - log_partition(model, max_units=max_units)


def _joint_table(model: LayeredBoltzmannMachine) -> tuple[Tensor, Tensor, Tensor]:
    """log f over all (even, odd) configurations: (table |E| x |O|, even configs, odd configs)."""
    sizes = model.layer_sizes
    even, odd = _groups(model)
    n_even, n_odd = sum(sizes[l] for l in even), sum(sizes[l] for l in odd)
    e = binary_configurations(n_even, device=model.device)
    o = binary_configurations(n_odd, device=model.device)
    pe, po = _split(e, even, sizes), _split(o, odd, sizes)
    layers = []
    for l in range(model.num_layers):
        if l in pe:
            layers.append(pe[l].unsqueeze(1).expand(-1, o.shape[0], -1))
        else:
            layers.append(po[l].unsqueeze(0).expand(e.shape[0], -1, -1))
    return model.log_unnormalized_joint(layers), e, o


def block_gibbs_transition_matrix(model: LayeredBoltzmannMachine) -> Tensor:
    """T[e, e'] = sum_o p(o | e) p(e' | o) over even-layer configurations (codes as in `binary_configurations`
    over the concatenated even layers), in float64."""
    table, _, _ = _joint_table(model.to(dtype=torch.float64))
    p_odd_given_even = torch.softmax(table, dim=1)  # (E, O)
    p_even_given_odd = torch.softmax(table, dim=0)  # (E, O), columns sum to 1
    return p_odd_given_even @ p_even_given_odd.t()


def annealing_model_marginal(
    model: LayeredBoltzmannMachine, base_biases: Sequence[Tensor], betas: Tensor, *, max_units: int = 14
) -> Tensor:
    """p_ann(v) for every visible configuration v (index = `configuration_index(v)`), shaped (2^n_visible,).

    The forward chain starts from the base p_0 and applies T(beta_1), ..., T(beta_K), the collapsed block-Gibbs
    kernels of the geometric path, exactly as matrices. Tiny models only (all layers together <= max_units).
    """
    m = model.to(dtype=torch.float64)
    base = [c.to(dtype=torch.float64, device=m.device) for c in base_biases]
    _check_units(sum(m.layer_sizes), max_units, "p_ann")
    betas = torch.as_tensor(betas, dtype=torch.float64)
    table0, e, _ = _joint_table(m.annealed(0.0, base))
    p = torch.softmax(table0.flatten(), dim=0).reshape(table0.shape).sum(1)  # p_0 over even configurations
    for beta in betas[1:].tolist():
        p = p @ block_gibbs_transition_matrix(m.annealed(beta, base))
    # marginalize onto the visible layer: the first n_visible bits of the even code
    v_index = configuration_index(e[:, : m.n_visible])
    return torch.zeros(2**m.n_visible, dtype=torch.float64, device=m.device).index_add_(0, v_index, p)
