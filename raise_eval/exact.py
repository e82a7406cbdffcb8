"""Exact answers for small models, by enumeration: ground truth for every estimator test.

- `log_partition`: log Z, enumerating whichever parity group of layers (even or odd) has fewer units and
  summing the other out analytically; for an RBM, the smaller layer (up to about 25 units).
- `log_unnormalized_visible` / `log_likelihood`: log f(v) and log p(v).
- `annealing_model_marginal`: p_ann(v), the distribution of the visible state after the forward annealing chain
  x_0 ~ p_0, x_k ~ T_k(. | x_{k-1}) (k = 1..K) with the collapsed block-Gibbs kernel, computed by propagating
  p_0 through exact transition matrices built from the energy alone. RAISE is unbiased for this quantity.

DBNs (`raise_eval.models.boltzmann.dbn.DBN`) are handled too: log Z is the top RBM's, log f(v) sums the directed layers
x_1 .. x_{L-1} by enumeration, and p_ann(v) is the top RBM's annealing model pushed down through the directed
layers (the unrolled annealing model that unrolled RAISE is unbiased for).

Everything is computed in float64 from `log_unnormalized_joint` / `log_unnormalized_marginal`, never from the
samplers, so these functions check the kernels rather than repeat them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine

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
    """Exact log Z in float64, enumerating the parity group (even or odd layers) with fewer units (for a DBN, the
    top RBM's)."""
    if isinstance(model, DBN):
        return log_partition(model.top, max_units=max_units, chunk_size=chunk_size)
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

    Odd layers are summed out analytically; even hidden layers (x_2, x_4, ...) are enumerated. For a DBN, f(v) =
    sum_{x_1..x_{L-1}} prod p(x_l | x_{l+1}) f_top(x_{L-1}), each directed layer enumerated in turn.
    """
    if isinstance(model, DBN):
        log_top = _dbn_log_top_marginal_table(model, max_units)
        return _dbn_push_down(model.to(dtype=torch.float64), log_top, v, max_units)
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
    """Exact log p(v) = log f(v) - log Z in float64, shaped (*batch,) (RBM, DBM or DBN)."""
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
    For a DBN, `base_biases` are those of the top RBM's path: its annealing model over x_{L-1} is pushed down
    through the directed layers (the unrolled annealing model).
    """
    if isinstance(model, DBN):
        p_top = annealing_model_marginal(model.top, base_biases, betas, max_units=max_units)
        _check_units(model.n_visible, max_units, "p_ann")
        return _dbn_push_down(model.to(dtype=torch.float64), p_top.log(), None, max_units).exp()
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


def _dbn_log_top_marginal_table(dbn: DBN, max_units: int) -> Tensor:
    """log f_top(x_{L-1}) for every configuration of x_{L-1} (index = `configuration_index`)."""
    top = dbn.top.to(dtype=torch.float64)
    _check_units(top.n_visible, max_units, "a DBN's log f(v)")
    configs = binary_configurations(top.n_visible, device=top.device)
    return top.log_unnormalized_prob(configs)


def _dbn_push_down(dbn: DBN, log_top: Tensor, v, max_units: int) -> Tensor:
    """Push log weights over x_{L-1} (shaped (2^n_{L-1},)) down the directed layers.

    Returns log sum_{x_1..x_{L-1}} exp(log_top(x_{L-1})) prod_l p(x_l | x_{l+1}) at the given v (shaped
    (*batch,)), or for every visible configuration (shaped (2^n_visible,)) when v is None.
    """
    log_dist = log_top
    for l in range(dbn.num_layers - 3, -1, -1):  # x_l given x_{l+1}, from l = L-2 down to 0
        above = binary_configurations(dbn.layer_sizes[l + 1], device=dbn.device)
        logits = dbn.generative_logits(above, l)  # (2^n_{l+1}, n_l)
        if l == 0 and v is not None:
            x = v.to(dtype=torch.float64, device=dbn.device)
            # log p(v | x_1) = v . logits - sum softplus(logits): a product, not a (*batch, 2^n_1, n_visible)
            # broadcast, which for 784 visible units and 2^16 configurations would need terabytes.
            log_p = x @ logits.t() - F.softplus(logits).sum(-1)  # (*batch, 2^n_1)
            return torch.logsumexp(log_p + log_dist, dim=-1)
        _check_units(dbn.layer_sizes[l], max_units, "a DBN's directed layers")
        below = binary_configurations(dbn.layer_sizes[l], device=dbn.device)
        log_p = below @ logits.t() - F.softplus(logits).sum(-1)  # (2^n_l, 2^n_{l+1}): log p(x_l | x_{l+1})
        log_dist = torch.logsumexp(log_p + log_dist, dim=-1)
    return log_dist
