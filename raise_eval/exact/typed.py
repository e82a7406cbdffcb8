"""Exact answers for machines of typed layers (`MixedBoltzmannMachine`): the ground truth of their tests, and the
exact values of their evaluations. `raise_eval.exact`'s functions hand such machines (`typed_layers`) to these.

- `log_partition`: log Z, enumerating the parity group of layers (even or odd) that is all discrete and has fewer
  configurations (q^n for a categorical layer, 2^n for Bernoulli and spin layers), the other group summed out by
  its layers' log-normalizers (a Gaussian integral for a Gaussian layer). A chain of Gaussian layers only (a
  Gaussian-Gaussian RBM) has the closed form of a Gaussian integral: log det and a solve of its precision.
- `log_unnormalized_visible`: log f(v); an RBM's is closed form (its hidden layer's log-normalizer), a DBM's
  enumerates the hidden parity group ('odd': x_1, x_3, ...; 'even': x_2, x_4, ...) that is discrete and smaller.
- `exact_cost`: what these would enumerate, without doing it ("units" are log2 of the configurations, rounded
  up, so that 2^units is the count the limits speak of).
- `annealing_model_marginal` / `log_annealing_model`: p_ann(v), the distribution of the forward annealing chain's
  final visible state (x_0 ~ p_0, x_k ~ T_k(. | x_{k-1}), T_k the collapsed block-Gibbs kernel at beta_k), for
  the unbiasedness tests of RAISE: by exact transition matrices when every layer is discrete; for an RBM with a
  Gaussian layer, through the discrete layer (Gauss-Hermite quadrature over the Gaussian layer's units, a few at
  most), or in closed form when both layers are Gaussian.

Float64 throughout, from the models' energies and log-normalizers, never from the samplers.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from raise_eval.exact.enumeration import (
    BYTES,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_UNITS,
    ExactCost,
    RunningLogSumExp,
    chunks,
    grow_bar,
    plan_chunks,
    progress_bar,
)
from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine

GAUSS_HERMITE_NODES = 64  # per Gaussian unit; the integrands are smooth (products of sigmoids or softmaxes)


def check_known_layers(model: MixedBoltzmannMachine) -> None:
    """ValueError naming every layer the exact answers do not know: they enumerate discrete layers (their support)
    and integrate continuous layers only where the conditional is normal (`Layer.normal_conditional`); a continuous
    layer of any other kind is refused, never treated as Gaussian."""
    unknown = [
        f"layer {l}, {layer.describe()} (support {layer.support.describe()})"
        for l, layer in enumerate(model.layers)
        if not (layer.discrete or layer.normal_conditional)
    ]
    if unknown:
        raise ValueError(
            f"exact answers for {model.describe()} cannot be computed: {'; '.join(unknown)} is continuous without a "
            "normal conditional, which can be neither enumerated nor integrated here; use AIS/RAISE"
        )


def _count(model: MixedBoltzmannMachine, group: list[int]) -> Optional[int]:
    """Configurations of the layers `group` together (None when one of them is continuous)."""
    if any(not model.layers[l].discrete for l in group):
        return None
    return math.prod(model.layers[l].num_configurations for l in group)


def _units(count: int) -> int:
    return max(0, math.ceil(math.log2(count))) if count > 1 else 0


def group_configurations(model: MixedBoltzmannMachine, group: list[int], start: int, stop: int) -> dict[int, Tensor]:
    """Configurations start..stop-1 of the layers `group` together, layer by layer (float64, (stop - start, width)):
    the code is mixed-radix, the first layer of the group the least significant."""
    codes = torch.arange(start, stop, dtype=torch.int64, device=model.device)
    out = {}
    for l in group:
        layer = model.layers[l]
        n = layer.num_configurations
        local = codes % n
        codes = codes // n
        # a layer's own configurations for each code: built from the distinct local codes in range
        lo, hi = int(local.min()), int(local.max()) + 1
        table = layer.configurations(lo, hi, dtype=torch.float64, device=model.device)
        out[l] = table[local - lo]
    return out


def _groups(model: MixedBoltzmannMachine) -> tuple[list[int], list[int]]:
    return list(range(0, model.num_layers, 2)), list(range(1, model.num_layers, 2))


def _log_z_route(model: MixedBoltzmannMachine) -> tuple[str, list[int], int]:
    """('even'/'odd', the layers enumerated, configurations) or ('closed-form', [], 1) for an all-Gaussian chain."""
    check_known_layers(model)
    even, odd = _groups(model)
    options = [(name, g, _count(model, g)) for name, g in (("even", even), ("odd", odd))]
    options = [o for o in options if o[2] is not None]
    if not options:
        if all(layer.normal_conditional for layer in model.layers):
            return "closed-form", [], 1
        raise ValueError(
            f"exact log Z of {model.describe()}: neither parity group of layers is all discrete, so neither can be "
            "enumerated (continuous layers are integrated, not enumerated); use AIS/RAISE"
        )
    return min(options, key=lambda o: o[2])


def _log_f_route(model: MixedBoltzmannMachine) -> tuple[str, list[int], int]:
    check_known_layers(model)
    if model.num_layers == 2:
        return "closed-form", [], 1
    odd, even = list(range(1, model.num_layers, 2)), list(range(2, model.num_layers, 2))
    options = [(name, g, _count(model, g)) for name, g in (("odd", odd), ("even", even))]
    options = [o for o in options if o[2] is not None]
    if not options:
        raise ValueError(
            f"exact log f(v) of {model.describe()}: no hidden parity group is all discrete; use the estimators"
        )
    return min(options, key=lambda o: o[2])


def exact_cost(model: MixedBoltzmannMachine, num_vectors: int) -> ExactCost:
    """`raise_eval.exact.ExactCost` of a machine of typed layers (units: log2 of the configurations, rounded up)."""
    n = int(num_vectors)
    macs_per_config = sum(w.numel() for w in model.weights)
    try:
        z_name, z_group, z_count = _log_z_route(model)
        f_name, f_group, f_count = _log_f_route(model)
    except ValueError as e:  # no route: the cost says why instead of counting configurations
        return ExactCost(n, 0, "none", 0, 0, "none", 0, 0, 0, refusal=str(e))
    widths = model.layer_sizes
    z_exps = z_count * sum(widths[l] for l in range(model.num_layers) if l not in z_group)
    if f_name == "closed-form":
        f_macs, f_exps = n * (macs_per_config + widths[0]), n * sum(widths[1:])
    else:
        f_macs = n * f_count * macs_per_config
        f_exps = n * f_count * sum(widths[l] for l in range(1, model.num_layers) if l not in f_group)
    return ExactCost(
        n, _units(z_count), z_name, z_count * macs_per_config, z_exps, f_name, _units(f_count), f_macs, f_exps
    )


def _log_z_bytes(model: MixedBoltzmannMachine) -> int:
    """Bytes of float64 temporaries per configuration of `log_partition`'s enumeration."""
    return BYTES * (4 * sum(model.layer_sizes) + 8)


def _log_f_bytes(model: MixedBoltzmannMachine) -> int:
    """Bytes per (vector, configuration) pair of `log_unnormalized_visible`'s enumeration."""
    return BYTES * (3 * sum(model.layer_sizes) + 8)


def chunk_bytes(model: MixedBoltzmannMachine, num_vectors: int, with_log_f: bool, max_bytes: int) -> int:
    """Peak bytes of one chunk of the enumerations `log_partition` (and, `with_log_f`, `log_unnormalized_visible` of
    `num_vectors` vectors) run within `max_bytes`, by the same per-configuration sizes they plan their chunks with."""
    _, _, z_count = _log_z_route(model)
    peak = min(max_bytes, z_count * _log_z_bytes(model))
    name, _, f_count = _log_f_route(model)
    if with_log_f and name != "closed-form":
        peak = max(peak, min(max_bytes, f_count * max(1, int(num_vectors)) * _log_f_bytes(model)))
    return peak


def _check(count: int, max_units: int, what: str) -> None:
    if count > 2**max_units:
        raise ValueError(
            f"exact {what} would enumerate {count:.3g} configurations (limit 2^{max_units}); use "
            "AIS/RAISE, or raise max_units if you really want to wait"
        )


def _gaussian_log_partition(m: MixedBoltzmannMachine) -> float:
    """log Z of a chain of Gaussian layers only: -x^T P x / 2 + eta . x + C integrated in closed form."""
    precision = m._gaussian_precision(list(range(m.num_layers)))
    eta = torch.cat([b[0] for b in m.biases])
    lam = torch.cat([b[1] for b in m.biases])
    const = -0.5 * float((eta.square() / lam).sum())
    chol = torch.linalg.cholesky(precision)
    logdet = 2.0 * float(torch.log(torch.diagonal(chol)).sum())
    solved = torch.cholesky_solve(eta.unsqueeze(1), chol).squeeze(1)
    d = eta.numel()
    return const + 0.5 * d * math.log(2 * math.pi) - 0.5 * logdet + 0.5 * float(eta @ solved)


def log_partition(
    model: MixedBoltzmannMachine,
    *,
    max_units: int = DEFAULT_MAX_UNITS,
    chunk_size: Optional[int] = None,
    max_bytes: Optional[int] = None,
    progress: bool = False,
) -> float:
    """Exact log Z in float64 (see the module docstring for the route)."""
    m = model.to(dtype=torch.float64)
    name, group, count = _log_z_route(m)
    if name == "closed-form":
        return _gaussian_log_partition(m)
    _check(count, max_units, "log Z")
    max_bytes = DEFAULT_MAX_BYTES if max_bytes is None else int(max_bytes)
    per_config = _log_z_bytes(m)
    c, _ = plan_chunks(count, 1, per_config, 0, 0, max_bytes, chunk_size)
    acc = RunningLogSumExp(1, m.device)
    with progress_bar(progress, "exact log Z") as bar:
        grow_bar(bar, len(chunks(count, c)))
        for start, stop in chunks(count, c):
            parts = group_configurations(m, group, start, stop)
            layers = [parts.get(l) for l in range(m.num_layers)]
            acc.add_(0, 1, m.log_unnormalized_marginal(layers).unsqueeze(0))
            bar.update(1)
    return float(acc.result()[0])


def log_unnormalized_visible(
    model: MixedBoltzmannMachine,
    v: Tensor,
    *,
    max_units: int = DEFAULT_MAX_UNITS,
    chunk_size: Optional[int] = None,
    max_bytes: Optional[int] = None,
    progress: bool = False,
) -> Tensor:
    """Exact log f(v) in float64 for v (*batch, n_visible) in the visible layer's states, shaped (*batch,)."""
    m = model.to(dtype=torch.float64)
    v = v.to(dtype=torch.float64, device=m.device)
    batch, flat = v.shape[:-1], v.reshape(-1, v.shape[-1])
    name, group, count = _log_f_route(m)
    if name == "closed-form":
        return m.log_unnormalized_marginal([flat, None]).reshape(batch)
    _check(count, max_units, "log f(v)")
    max_bytes = DEFAULT_MAX_BYTES if max_bytes is None else int(max_bytes)
    n = flat.shape[0]
    per_pair = _log_f_bytes(m)
    c, rows = plan_chunks(count, max(1, n), 0, per_pair, 0, max_bytes, chunk_size)
    acc = RunningLogSumExp(n, m.device)
    with progress_bar(progress, "exact log f(v)") as bar:
        grow_bar(bar, len(chunks(count, c)))
        for start, stop in chunks(count, c):
            parts = group_configurations(m, group, start, stop)
            k = stop - start
            for r0, r1 in chunks(n, rows):
                layers = [flat[r0:r1].unsqueeze(1).expand(-1, k, -1)]
                for l in range(1, m.num_layers):
                    layers.append(parts[l].unsqueeze(0).expand(r1 - r0, -1, -1) if l in parts else None)
                acc.add_(r0, r1, m.log_unnormalized_marginal(layers))
            bar.update(1)
    return acc.result().reshape(batch)


# ----------------------------------------------------------------------------------------------- annealing model
def _hermite(n: int, dims: int, dtype=torch.float64) -> tuple[Tensor, Tensor]:
    """Gauss-Hermite nodes (n^dims, dims) and weights (n^dims,) summing to 1 for the standard normal in `dims`
    dimensions (tensor product)."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / w.sum()
    nodes = torch.cartesian_prod(*[torch.as_tensor(x, dtype=dtype)] * dims).reshape(-1, dims)
    weights = torch.cartesian_prod(*[torch.as_tensor(w, dtype=dtype)] * dims).reshape(-1, dims).prod(-1)
    return nodes, weights


def _conditional_table(m: MixedBoltzmannMachine, l: int, configs: Tensor, u: Tensor) -> Tensor:
    """log p(x_l = configs[j] | input u[i]) for a discrete layer l, shaped (rows of u, configs)."""
    layer, params = m.layers[l], m.biases[l]
    return (
        layer.log_potential(params, configs).unsqueeze(0)
        + u @ configs.t()
        - layer.log_normalizer(params, u).unsqueeze(1)
    )


def _joint_table(m: MixedBoltzmannMachine) -> tuple[Tensor, dict[int, Tensor]]:
    even, odd = _groups(m)
    e = group_configurations(m, even, 0, _count(m, even))
    o = group_configurations(m, odd, 0, _count(m, odd))
    ne, no = _count(m, even), _count(m, odd)
    layers = []
    for l in range(m.num_layers):
        layers.append(e[l].unsqueeze(1).expand(-1, no, -1) if l in e else o[l].unsqueeze(0).expand(ne, -1, -1))
    return m.log_unnormalized_joint(layers), e


def annealing_model_marginal(
    model: MixedBoltzmannMachine, base_biases, betas: Tensor, *, max_units: int = 14
) -> Tensor:
    """p_ann(v) for every visible configuration (index `model.layers[0].configuration_index`), shaped (count,):
    for machines whose layers are all discrete (tables over both parity groups, at most 2^max_units joint
    configurations), or RBMs with a discrete visible layer and a Gaussian hidden one (quadrature)."""
    m = model.to(dtype=torch.float64)
    base = [c.to(dtype=torch.float64, device=m.device) for c in base_biases]
    betas = torch.as_tensor(betas, dtype=torch.float64).tolist()
    check_known_layers(m)
    if not m.layers[0].discrete:
        raise ValueError("a continuous visible layer has densities, not a table: use log_annealing_model(..., v)")
    if all(layer.discrete for layer in m.layers):
        even, odd = _groups(m)
        _check(_count(m, even) * _count(m, odd), max_units, "p_ann")
        table, e = _joint_table(m.annealed(0.0, base))
        p = torch.softmax(table.flatten(), 0).reshape(table.shape).sum(1)
        for beta in betas[1:]:
            t, _ = _joint_table(m.annealed(beta, base))
            p = p @ (torch.softmax(t, 1) @ torch.softmax(t, 0).t())
        index = m.layers[0].configuration_index(e[0])
        return torch.zeros(m.layers[0].num_configurations, dtype=torch.float64).index_add_(0, index, p)
    if m.num_layers != 2:
        raise ValueError("exact p_ann with a Gaussian layer is computed for RBMs only")
    return _discrete_visible_gaussian_hidden(m, base, betas)


def _discrete_visible_gaussian_hidden(m, base, betas) -> Tensor:
    lv, lh = m.layers
    _check(lv.num_configurations, 14, "p_ann")
    v = lv.configurations(0, lv.num_configurations, device=m.device)
    nodes, weights = _hermite(GAUSS_HERMITE_NODES, lh.size)
    p = torch.softmax(lv.log_potential(base[0], v), 0)  # the base's visible layer (independent of the hidden)
    for beta in betas[1:]:
        at = m.annealed(beta, base)
        eta, lam = at.biases[1]
        h_mean = (eta + at.layer_input([v, None], 1)) / lam  # (V, n_h)
        h = h_mean.unsqueeze(1) + nodes.unsqueeze(0) * lam.rsqrt()  # (V, G, n_h)
        u = at.layer_input([None, h], 0)  # (V, G, width_v)
        log_cond = _conditional_table(at, 0, v, u.reshape(-1, lv.width)).reshape(v.shape[0], -1, v.shape[0])
        p = p @ (weights.unsqueeze(-1) * log_cond.exp()).sum(1)
    return p


def log_annealing_model(
    model: MixedBoltzmannMachine, base_biases, betas: Tensor, v: Tensor, *, nodes: int = GAUSS_HERMITE_NODES
) -> Tensor:
    """log p_ann(v) at the rows of v (N, n_visible), float64 (N,): a log-probability for a discrete visible layer,
    a log-density for a Gaussian one (RBMs: a discrete hidden layer by quadrature over the visible units, at most
    three of them; a Gaussian one in closed form)."""
    m = model.to(dtype=torch.float64)
    v = v.to(dtype=torch.float64, device=m.device)
    base = [c.to(dtype=torch.float64, device=m.device) for c in base_biases]
    betas = torch.as_tensor(betas, dtype=torch.float64).tolist()
    check_known_layers(m)
    if m.layers[0].discrete:
        p = annealing_model_marginal(m, base, betas)
        return p[m.layers[0].configuration_index(v)].log()
    if m.num_layers != 2:
        raise ValueError("exact p_ann with a Gaussian layer is computed for RBMs only")
    if m.layers[1].normal_conditional:
        return _gaussian_gaussian(m, base, betas, v)
    return _gaussian_visible(m, base, betas, v, nodes)


def _gaussian_visible(m, base, betas, v: Tensor, nodes: int) -> Tensor:
    """p_ann(v) = sum_h pi_K(h) p_K(v | h), pi_k(h) = E_{p_{k-1}}[p_k(h | v')], the expectations by quadrature
    over v' (p_0 the base's Gaussian, then the mixtures p_k(v) = sum_h pi_k(h) N(v; m_k(h), 1 / lam_k))."""
    lv, lh = m.layers
    if lv.size > 3:
        raise ValueError("quadrature over more than three Gaussian units is out of reach here")
    _check(lh.num_configurations, 14, "p_ann")
    h = lh.configurations(0, lh.num_configurations, device=m.device)  # (H, width_h)
    x, w = _hermite(nodes, lv.size)

    def gaussian_given_h(at):
        eta, lam = at.biases[0]
        return (eta + at.layer_input([None, h], 0)) / lam, lam.rsqrt()  # means (H, n_v), sd (n_v,)

    def hidden_given(at, points):  # p(h | v) for points (P, n_v): (P, H)
        return _conditional_table(at, 1, h, at.layer_input([points, None], 1)).exp()

    eta0, lam0 = base[0]
    pi = None
    previous = None
    for beta in betas[1:]:
        at = m.annealed(beta, base)
        if pi is None:
            points = eta0 / lam0 + x * lam0.rsqrt()  # the base's visible Gaussian
            pi = w @ hidden_given(at, points)
        else:
            means, sd = previous
            points = means.unsqueeze(1) + x.unsqueeze(0) * sd  # (H, G, n_v)
            cond = hidden_given(at, points.reshape(-1, lv.size)).reshape(h.shape[0], x.shape[0], h.shape[0])
            pi = pi @ (w.unsqueeze(-1) * cond).sum(1)
        previous = gaussian_given_h(at)
    means, sd = previous
    log_normal = (
        -0.5 * ((v.unsqueeze(1) - means.unsqueeze(0)) / sd).square() - torch.log(sd) - 0.5 * math.log(2 * math.pi)
    ).sum(-1)  # (N, H)
    return torch.logsumexp(log_normal + pi.log().unsqueeze(0), 1)


def _gaussian_gaussian(m, base, betas, v: Tensor) -> Tensor:
    """p_ann of a Gaussian-Gaussian RBM: the chain is linear-Gaussian, so p_k = N(mean_k, cov_k) exactly."""
    eta0, lam0 = base[0]
    mean, cov = eta0 / lam0, torch.diag(1.0 / lam0)
    for beta in betas[1:]:
        at = m.annealed(beta, base)
        (eta_v, lam_v), (eta_h, lam_h) = at.biases
        w = at.weight_scale * at.weights[0]
        a_h = w.t() / lam_h.unsqueeze(1)  # h = a_h v + eta_h / lam_h + noise(1 / lam_h)
        a_v = w / lam_v.unsqueeze(1)
        h_mean, h_cov = a_h @ mean + eta_h / lam_h, a_h @ cov @ a_h.t() + torch.diag(1.0 / lam_h)
        mean, cov = a_v @ h_mean + eta_v / lam_v, a_v @ h_cov @ a_v.t() + torch.diag(1.0 / lam_v)
    dist = torch.distributions.MultivariateNormal(mean, covariance_matrix=cov)
    return dist.log_prob(v)
