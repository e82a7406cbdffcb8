"""The trajectory path: its densities, knots, schedules and checks (exact, deterministic properties; the
estimators' unbiasedness along it is in tests/estimators/test_trajectory.py)."""

from __future__ import annotations

import pytest
import torch
from raise_eval.models import DBM, RBM, LayeredBoltzmannMachine

from raise_eval import BoltzmannPath, exact, linear_schedule
from raise_eval.paths.trajectory import TrajectoryPath, check_trajectory, trajectory_path
from tests.trajectories import random_walk, start_biases, typed_walk


@pytest.fixture(params=[(8, 6), (5, 4, 3), (4, 3, 3, 2)], ids=["rbm", "dbm-2-hidden", "dbm-3-hidden"])
def walk(request):
    return random_walk(request.param, seed=1)


def _even_states(path, n, seed):
    g = torch.Generator().manual_seed(seed)
    layers = [
        (torch.rand(n, k, generator=g, dtype=torch.float64) < 0.5).double() if l % 2 == 0 else None
        for l, k in enumerate(path.layer_sizes)
    ]
    return path.state_from_layers(layers)


def test_points_knots_and_interpolation(walk):
    path = trajectory_path(walk, start_biases(walk[0]))
    assert path.checkpoint_points == [1, 2, 3] and path.knots == [0.0, 1 / 3, 2 / 3, 1.0]
    assert path.model is walk[-1] and path.start_is_independent
    for point, model in zip(path.checkpoint_points, walk):
        at = path.at(path.knots[point])
        for a, b in zip(at.weights + at.biases, model.weights + model.biases):
            assert torch.equal(a, b)  # the knots are the checkpoints themselves, bit for bit
    # halfway along link 1: the mean of its two ends
    mid = path.at(0.5)
    for a, b, c in zip(mid.weights, walk[0].weights, walk[1].weights):
        torch.testing.assert_close(a, (b + c) / 2)
    assert all(not w.any() for w in path.at(0.0).weights)


def test_log_density_ratio_equals_the_machines_own_ratio(walk):
    """Inside a link, across a knot and across several knots: the term-by-term ratio (with the link's cached inputs)
    equals the difference of log f under the interpolated machines."""
    path = trajectory_path(walk, start_biases(walk[0]))
    state = _even_states(path, 64, seed=2)
    for a, b in [(0.0, 0.1), (0.2, 0.3), (1 / 3, 0.5), (0.5, 1 / 3), (0.9, 1.0), (0.1, 0.9), (1.0, 0.0), (0.4, 0.4)]:
        ratio, carried = path.weight_update(state, a, b)
        direct = path.at(b).log_unnormalized_marginal(list(state.layers)) - path.at(a).log_unnormalized_marginal(
            list(state.layers)
        )
        torch.testing.assert_close(ratio, direct.double(), rtol=0, atol=1e-10)
        torch.testing.assert_close(
            path.log_density(carried, b), path.at(b).log_unnormalized_marginal(list(state.layers))
        )


def test_one_checkpoint_from_a_base_is_the_geometric_path(tiny_rbm, train_vectors):
    """The first link from a prepended base c to (W, b) is the temperature path: the exact annealing models agree."""
    from raise_eval import data_base_rates

    base = data_base_rates(tiny_rbm, train_vectors)
    path = trajectory_path([tiny_rbm], base)
    betas = linear_schedule(5)
    along = exact.annealing_model_marginal_along([path.at(b) for b in betas.tolist()])
    geometric = exact.annealing_model_marginal(tiny_rbm, BoltzmannPath(tiny_rbm, base).base_biases, betas)
    torch.testing.assert_close(along, geometric, rtol=1e-12, atol=1e-15)
    assert path.log_partition_initial == pytest.approx(BoltzmannPath(tiny_rbm, base).log_partition_initial)


def test_schedule_passes_through_every_knot():
    path = trajectory_path(random_walk((8, 6), checkpoints=4))
    betas = path.schedule(3, first_link_steps=7)
    assert betas.numel() == 7 + 3 * 3 + 1 and betas[0] == 0 and betas[-1] == 1
    assert path.knot_indices(betas) == [0, 7, 10, 13, 16]
    assert bool((betas[1:] >= betas[:-1]).all())
    assert path.schedule([1, 2, 3, 4]).numel() == 11
    with pytest.raises(ValueError, match="skips the knots"):
        path.knot_indices(linear_schedule(7))
    with pytest.raises(ValueError, match="4 counts"):
        path.schedule([1, 2])


def test_a_first_checkpoint_without_weights_is_the_start():
    walk = random_walk((8, 6))
    zero = RBM(torch.zeros_like(walk[0].W), walk[0].vbias, walk[0].hbias)
    path = trajectory_path([zero, *walk])
    assert path.checkpoint_points == [0, 1, 2, 3] and path.num_links == 3
    assert path.log_partition_initial == pytest.approx(exact.log_partition(zero))
    # with base biases given, a base is prepended all the same
    assert trajectory_path([zero, *walk], start_biases(zero)).checkpoint_points == [1, 2, 3, 4]


def test_a_path_without_an_independent_start_refuses_to_sample_it():
    walk = random_walk((8, 6))
    piece = TrajectoryPath(walk)
    assert not piece.start_is_independent
    with pytest.raises(ValueError, match="independent start"):
        _ = piece.log_partition_initial
    with pytest.raises(ValueError, match="independent start"):
        piece.sample_initial(3, torch.Generator())


def test_truncated_path_ends_at_its_point():
    walk = random_walk((5, 4, 3))
    path = trajectory_path(walk, start_biases(walk[0]))
    short = path.truncated(2)
    assert short.model is walk[1] and short.checkpoint_points == [1, 2] and short.knots == [0.0, 0.5, 1.0]


def test_models_that_are_not_one_trajectory_are_refused():
    rbms = random_walk((8, 6))
    with pytest.raises(ValueError, match="layers 8-5"):
        check_trajectory([rbms[0], RBM(torch.zeros(8, 5), torch.zeros(8), torch.zeros(5))])
    with pytest.raises(ValueError, match="float32"):
        check_trajectory([rbms[0], rbms[1].to(dtype=torch.float32)])
    plain = LayeredBoltzmannMachine(rbms[1].weights, rbms[1].biases)
    with pytest.raises(ValueError, match="a LayeredBoltzmannMachine but checkpoint 0 an RBM"):
        check_trajectory([rbms[0], plain])
    with pytest.raises(TypeError, match="binary or typed layers.; checkpoint 0 is a Linear"):
        check_trajectory([torch.nn.Linear(2, 2)])
    with pytest.raises(ValueError, match="at least one"):
        trajectory_path([])
    dbm = random_walk((5, 4, 3))[0]
    assert isinstance(dbm, DBM)
    with pytest.raises(ValueError, match="base bias 1"):
        trajectory_path([dbm], [torch.zeros(5), torch.zeros(3), torch.zeros(3)])


TYPED = {
    "potts-binary": ("categorical", "bernoulli"),
    "gaussian-binary": ("gaussian", "bernoulli"),
    "spin-potts": ("spin", "categorical"),
    "gaussian-spin-binary": ("gaussian", "spin", "bernoulli"),
}


def _typed_states(path, n, seed):
    """Even layers drawn from the independent start (states of each typed layer)."""
    g = torch.Generator().manual_seed(seed)
    return path.state_from_layers(
        [path.sample_base_layer(l, (n,), g) if l % 2 == 0 else None for l in range(len(path.layer_sizes))]
    )


@pytest.mark.parametrize("kinds", list(TYPED.values()), ids=list(TYPED))
def test_typed_layers_follow_a_trajectory(kinds):
    """Machines of typed layers (Potts, Gaussian, spin units): the knots are the checkpoints bit for bit, and the
    term-by-term ratio and log density equal the interpolated machines' own log f, inside links and across knots."""
    walk = typed_walk(kinds, seed=1)
    path = trajectory_path(walk)
    assert path.checkpoint_points == [1, 2, 3] and path.start_is_independent
    for point, model in zip(path.checkpoint_points, walk):
        at = path.at(path.knots[point])
        assert at.layers == model.layers
        for a, b in zip(at.weights + at.biases, model.weights + model.biases):
            assert torch.equal(a, b)
    state = _typed_states(path, 64, seed=2)
    for a, b in [(0.0, 0.1), (0.2, 0.3), (1 / 3, 0.5), (0.5, 1 / 3), (0.9, 1.0), (0.1, 0.9), (1.0, 0.0)]:
        ratio, carried = path.weight_update(state, a, b)
        layers = list(state.layers)
        direct = path.at(b).log_unnormalized_marginal(layers) - path.at(a).log_unnormalized_marginal(layers)
        torch.testing.assert_close(ratio, direct.double(), rtol=0, atol=1e-10)
        torch.testing.assert_close(path.log_density(carried, b), path.at(b).log_unnormalized_marginal(layers))
    # the start: independent units whose log Z_0 is the enumerated one
    assert path.log_partition_initial == pytest.approx(exact.log_partition(path.point_model(0)), abs=1e-10)
    moved = path.transition(state, 0.5, torch.Generator().manual_seed(3))
    for l, layer in enumerate(walk[0].layers):
        if l % 2 == 0:
            layer.check_states(moved.layers[l], "a chain's layer")  # states of the layer's own support


def test_a_typed_and_a_binary_machine_are_not_one_trajectory():
    typed = typed_walk(("bernoulli", "bernoulli"), seed=1)
    binary = random_walk((3, 2), seed=1)
    with pytest.raises(ValueError, match="not one model's trajectory"):
        check_trajectory([binary[0], typed[0]])
    spins = typed_walk(("spin", "bernoulli"), seed=1)  # as wide as `typed`, other units
    with pytest.raises(ValueError, match=r"checkpoint 1 has layers spin\(3\) - bernoulli\(3\) but checkpoint 0 has "
                                         r"bernoulli\(3\) - bernoulli\(3\)"):  # fmt: skip
        check_trajectory([typed[0], spins[0]])


def test_fully_visible_models_have_their_own_trajectory_and_do_not_mix_with_machines():
    from raise_eval.models.fully_visible import FullyVisibleModel

    ising = FullyVisibleModel(torch.zeros(3), torch.zeros(3, 3), sites="spin")
    check_trajectory([ising, ising])  # one run's fully visible checkpoints: a trajectory (FullyVisibleTrajectoryPath)
    rbm = random_walk((3, 2), seed=1)[0]
    with pytest.raises(TypeError, match="checkpoint 1 is a fully-visible model"):
        check_trajectory([rbm, ising])
    with pytest.raises(TypeError, match=r"checkpoint 1 \(RBM\) is not a fully visible model but checkpoint 0 is"):
        check_trajectory([ising, rbm])
    bernoulli = FullyVisibleModel(torch.zeros(3), torch.zeros(3, 3), sites="bernoulli")
    with pytest.raises(ValueError, match=r"checkpoint 1 is fully-visible bernoulli\(3\) but checkpoint 0 is"):
        check_trajectory([ising, bernoulli])
