"""CD/PCD training of RBMs of typed layers: on samples of a tiny two-mode teacher, the trained model's exact
log-likelihood closes most of the teacher's margin over the independent-units fit it starts from, for every visible
type; the data are checked against the layer; a deadline stops training early."""

import time

import pytest
import torch
from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine
from raise_eval.models.boltzmann.units import BernoulliLayer
from raise_eval.models.training.mixed import MixedRBMTrainingConfig, train_mixed_rbm

from raise_eval import exact
from tests.mixed_models import KINDS, exact_visible_samples, small_layer, tiny_pair

STRENGTH = {"bernoulli": 3.0, "spin": 1.3, "categorical": 3.0, "gaussian": 2.0}


def two_mode_teacher(kind: str) -> MixedBoltzmannMachine:
    """One hidden unit with weights +-STRENGTH on a random pattern and the bias that makes both of its states
    equally likely: two modes that independent units cannot represent."""
    layer = small_layer(kind)
    g = torch.Generator().manual_seed(5)
    W = STRENGTH[kind] * (torch.randint(0, 2, (layer.width, 1), generator=g, dtype=torch.float64) * 2 - 1)
    b = torch.zeros(layer.param_shape, dtype=torch.float64)
    if kind == "gaussian":
        b[1] = 1.0
    c = -(layer.log_normalizer(b, W[:, 0]) - layer.log_normalizer(b))
    return MixedBoltzmannMachine([layer, BernoulliLayer(1)], [W], [b, c.reshape(1)])


@pytest.mark.parametrize("visible", KINDS)
@pytest.mark.parametrize("method", ["pcd", "cd"])
def test_training_learns_what_independent_units_cannot(visible, method):
    teacher = two_mode_teacher(visible)
    data = exact_visible_samples(teacher, 2000, torch.Generator().manual_seed(1)).float()
    config = MixedRBMTrainingConfig(n_hidden=3, epochs=25, batch_size=50, learning_rate=0.03, method=method, sigma=1.0)
    model, report = train_mixed_rbm(data, teacher.layers[0], config, generator=torch.Generator().manual_seed(2))
    assert report["epochs_completed"] == 25 and not report["stopped_by_budget"]
    start, _ = train_mixed_rbm(
        data,
        teacher.layers[0],
        MixedRBMTrainingConfig(n_hidden=3, epochs=0, sigma=1.0),
        generator=torch.Generator().manual_seed(2),
    )
    trained = float(exact.log_likelihood(model, data).mean())
    initial = float(exact.log_likelihood(start, data).mean())
    truth = float(exact.log_likelihood(teacher, data.double()).mean())
    assert truth - initial > 0.05 and trained > initial + 0.7 * (truth - initial), (initial, trained, truth)


def test_training_refuses_data_of_another_width_and_stops_at_a_deadline():
    teacher = tiny_pair("spin", "bernoulli")
    data = exact_visible_samples(teacher, 500, torch.Generator().manual_seed(1)).float()
    with pytest.raises(ValueError, match="has 3"):
        train_mixed_rbm(data[:, :2], teacher.layers[0], MixedRBMTrainingConfig(n_hidden=2), generator=torch.Generator())
    config = MixedRBMTrainingConfig(n_hidden=2, epochs=1000, batch_size=10)
    _, report = train_mixed_rbm(
        data, teacher.layers[0], config, generator=torch.Generator(), deadline=time.monotonic() + 0.2
    )
    assert report["stopped_by_budget"] and report["epochs_completed"] < 1000


def test_training_hands_its_trajectory_to_snapshot_every_n_updates_the_first_and_last_too():
    """Issue 44: a typed RBM's training run saved along the way (`scripts/train_units.py --save-trajectory`), as
    `train_rbm`'s snapshot does: the initial parameters, every N updates, the last; copies that later updates leave
    alone, the last one the returned model; the same model at the same seed as without snapshots."""
    teacher = tiny_pair("categorical", "bernoulli")
    data = exact_visible_samples(teacher, 70, torch.Generator().manual_seed(1)).float()
    config = MixedRBMTrainingConfig(n_hidden=2, epochs=2, batch_size=10)  # 7 updates per epoch, 14 in all
    seen = []
    model, _ = train_mixed_rbm(
        data, teacher.layers[0], config, generator=torch.Generator().manual_seed(3),
        snapshot=lambda updates, m: seen.append((updates, m)), snapshot_every=4,
    )  # fmt: skip
    assert [u for u, _ in seen] == [0, 4, 8, 12, 14]
    assert all(not m.weights[0].requires_grad for _, m in seen)
    assert not torch.equal(seen[0][1].weights[0], seen[1][1].weights[0])  # each a copy, not the training tensors
    for a, b in zip(seen[-1][1].weights + seen[-1][1].biases, model.weights + model.biases):
        assert torch.equal(a, b)
    plain, _ = train_mixed_rbm(data, teacher.layers[0], config, generator=torch.Generator().manual_seed(3))
    assert torch.equal(plain.weights[0], model.weights[0])
    with pytest.raises(ValueError, match="snapshot_every must be a positive number"):
        train_mixed_rbm(data, teacher.layers[0], config, generator=torch.Generator(), snapshot=print, snapshot_every=0)
