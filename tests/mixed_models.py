"""Tiny machines of typed layers for the tests, with brute-force truths computed apart from the library's exact code:
discrete layers summed over every state, Gaussian units integrated on a grid (one or two of them)."""

from __future__ import annotations

import itertools
import math

import torch
from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine, random_mixed_machine
from raise_eval.models.boltzmann.units import BernoulliLayer, CategoricalLayer, GaussianLayer, SpinLayer

from raise_eval import exact

KINDS = ("bernoulli", "spin", "categorical", "gaussian")
PAIRINGS = list(itertools.product(KINDS, KINDS))


def small_layer(kind: str, gaussian_units: int = 2):
    """The layer a tiny test machine uses for `kind`: 3 binary or spin units, 2 sites of 3 states, `gaussian_units`
    Gaussian units."""
    return {
        "bernoulli": BernoulliLayer(3),
        "spin": SpinLayer(3),
        "categorical": CategoricalLayer(2, 3),
        "gaussian": GaussianLayer(gaussian_units),
    }[kind]


def tiny_pair(visible: str, hidden: str, seed: int = 0) -> MixedBoltzmannMachine:
    """A float64 RBM of the two kinds with weights strong enough for several modes (weaker between two Gaussian
    layers, which keeps the density normalizable and the weights' tails light). A Gaussian hidden layer beside a
    Gaussian visible one has a single unit, so that the brute-force grid over both stays small."""
    g = torch.Generator().manual_seed(1000 + 17 * KINDS.index(visible) + KINDS.index(hidden) + seed)
    layers = [small_layer(visible), small_layer(hidden, 1 if visible == "gaussian" else 2)]
    # A Gaussian layer's log-normalizer is quadratic in its input: weaker weights beside one keep the annealing
    # weights' tails light enough for a standard error to mean something at K = 1.
    # Spins couple on a range of 2 (±1): their weights are kept below binary units' for the same reason.
    weight_std = (
        0.9
        if visible == hidden == "gaussian"
        else 0.6
        if "gaussian" in (visible, hidden)
        else 0.7
        if "spin" in (visible, hidden)
        else 1.0
    )
    return random_mixed_machine(
        layers,
        weight_std=weight_std,
        bias_std=0.7,
        sigma=1.0,
        generator=g,
        dtype=torch.float64,
    )


def tiny_dbm(kinds=("spin", "categorical", "bernoulli"), seed: int = 0) -> MixedBoltzmannMachine:
    g = torch.Generator().manual_seed(2000 + seed)
    layers = [small_layer(k) for k in kinds]
    return random_mixed_machine(layers, weight_std=0.7, bias_std=0.7, generator=g, dtype=torch.float64)


# ----------------------------------------------------------------------------------------------- brute force
def _grid(n: int, lo: float, hi: float, points: int):
    x = torch.linspace(lo, hi, points, dtype=torch.float64)
    w = torch.full((points,), (hi - lo) / (points - 1), dtype=torch.float64)
    w[0] = w[-1] = w[0] / 2  # trapezoid
    nodes = torch.cartesian_prod(*[x] * n).reshape(-1, n)
    weights = torch.cartesian_prod(*[w] * n).reshape(-1, n).prod(-1)
    return nodes, weights


def layer_states(layer, points: int = 121, span: float = 12.0, center=None):
    """(states (S, width), log quadrature weights (S,)): every state of a discrete layer (weight 1), or a grid over
    a Gaussian layer's units (trapezoid weights) centred at `center` (a width vector)."""
    if layer.discrete:
        states = layer.configurations(0, layer.num_configurations)
        return states, torch.zeros(states.shape[0], dtype=torch.float64)
    nodes, weights = _grid(layer.size, -span, span, points)
    if center is not None:
        nodes = nodes + center
    return nodes, weights.log()


def brute_log_partition(model: MixedBoltzmannMachine, points: int = 121, span: float = 12.0) -> float:
    """log sum over every joint state of f(v, h) (grid integrals over Gaussian units) from log_unnormalized_joint."""
    grids = [layer_states(layer, points, span) for layer in model.layers]
    total = None
    # joint states of an RBM: the product of both layers' states
    (x0, w0), (x1, w1) = grids
    table = model.log_unnormalized_joint(
        [x0.unsqueeze(1).expand(-1, x1.shape[0], -1), x1.unsqueeze(0).expand(x0.shape[0], -1, -1)]
    )
    total = torch.logsumexp((table + w0.unsqueeze(1) + w1.unsqueeze(0)).flatten(), 0)
    return float(total)


def brute_log_f(model: MixedBoltzmannMachine, v: torch.Tensor, points: int = 121, span: float = 12.0) -> torch.Tensor:
    """log sum_h f(v, h) for an RBM by summing (integrating) the hidden layer from log_unnormalized_joint."""
    h, w = layer_states(model.layers[1], points, span)
    table = model.log_unnormalized_joint(
        [v.unsqueeze(1).expand(-1, h.shape[0], -1), h.unsqueeze(0).expand(v.shape[0], -1, -1)]
    )
    return torch.logsumexp(table + w.unsqueeze(0), 1)


# ----------------------------------------------------------------------------------------------- exact samples
def exact_visible_samples(model: MixedBoltzmannMachine, n: int, generator: torch.Generator) -> torch.Tensor:
    """n exact samples of an RBM's visible layer: from the table of p(v) when it is discrete; else h from its exact
    marginal (discrete), then v | h; for two Gaussian layers, from the joint Gaussian."""
    lv, lh = model.layers
    if lv.discrete:
        v = lv.configurations(0, lv.num_configurations)
        p = torch.softmax(exact.log_unnormalized_visible(model, v), 0)
        return v[torch.multinomial(p, n, replacement=True, generator=generator)]
    if lh.discrete:
        h = lh.configurations(0, lh.num_configurations)
        log_f_h = model.log_unnormalized_marginal([None, h])
        index = torch.multinomial(torch.softmax(log_f_h, 0), n, replacement=True, generator=generator)
        return model.sample_layer([None, h[index]], 0, generator)
    mean, cov = gaussian_visible_marginal(model)
    chol = torch.linalg.cholesky(cov)
    return mean + torch.randn(n, lv.size, generator=generator, dtype=torch.float64) @ chol.t()


def gaussian_visible_marginal(model: MixedBoltzmannMachine) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, covariance) of a Gaussian-Gaussian RBM's visible layer."""
    precision = model._gaussian_precision([0, 1])
    eta = torch.cat([b[0] for b in model.biases])
    cov = torch.linalg.inv(precision)
    mean = cov @ eta
    n = model.layers[0].size
    return mean[:n], cov[:n, :n]


def normal_cdf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))
