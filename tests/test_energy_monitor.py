"""The training hook on a user's energy model: `LikelihoodMonitor(test, energy=...)` evaluates an `EnergyModel` every
few epochs of its training loop with `evaluate_energy` (each record what a stand-alone `raise_eval.evaluate` of that
epoch's model gives), records the exact value where it is known (the user's log Z, or an enumeration on a small
discrete support), writes the CSV / JSON history and the plot, and never touches the parameters' gradients; what
does not apply is refused by name before training."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from raise_eval.models import EnergyModel
from raise_eval.models.energy import GaussianBase

import raise_eval
from raise_eval import LikelihoodMonitor
from raise_eval.evaluation.energy import EnergySettings
from raise_eval.exact import energy as exact_energy
from raise_eval.settings import SettingsError
from tests.energy_models import MLPEnergy, gaussian_energy, neural_energy

CHEAP = EnergySettings(steps=40, ais_chains=32, raise_chains=4, pilot_steps=20, seed=5)


def _gaussian_test(model, n=5):
    g = torch.Generator().manual_seed(1)
    return model.energy.mean + 0.3 * torch.randn(n, model.n_visible, generator=g, dtype=torch.float64)


def test_a_record_is_what_evaluate_gives_and_its_exact_value_is_the_user_s_log_z(tmp_path):
    model, log_z = gaussian_energy(2)
    test = _gaussian_test(model)
    history = tmp_path / "history.csv"
    monitor = LikelihoodMonitor(test, energy=CHEAP, exact_log_z=lambda m: m.energy.log_partition(),
                                history_path=history)  # fmt: skip
    rec = monitor(0, model)
    ref = raise_eval.evaluate(model, test, **monitor.evaluate_kwargs)
    assert (rec.ais, rec.raise_, rec.gap, rec.log_z) == (ref.upper_mean, ref.lower_mean, ref.gap, ref.log_z)
    assert (rec.ais_se, rec.raise_se) == (ref.log_z_stderr, ref.lower_stderr)
    truth = float(model.log_unnormalized(test).mean()) - log_z
    assert rec.log_z_exact == log_z and rec.exact == pytest.approx(truth, abs=1e-9)
    assert monitor.last_report.kernel == "hmc" and rec.verdict is None
    rows = list(csv.DictReader(history.open()))
    assert len(rows) == 1 and float(rows[0]["exact"]) == pytest.approx(truth, abs=1e-9)
    assert monitor(1, model).log_z == rec.log_z  # the same model, the same seed: the same numbers
    assert len(monitor.history) == 2 and LikelihoodMonitor(test, energy=True, every=2)(1, model) is None


def test_inside_a_training_loop_the_monitor_leaves_the_gradients_alone(tmp_path):
    """A few steps of short-run Langevin training on a 2-D MLP energy, monitored at every epoch: the records follow
    the model as it changes, the parameters' .grad is what the training made, and the JSON history holds them."""
    torch.manual_seed(0)
    energy = MLPEnergy(2, hidden=8, seed=1, scale=0.5)
    model = EnergyModel(energy, support=("real", -3.0, 3.0), event_shape=(2,))
    g = torch.Generator().manual_seed(2)
    data = torch.cat([torch.randn(64, 2, generator=g, dtype=torch.float64) * 0.3 + 1,
                      torch.randn(64, 2, generator=g, dtype=torch.float64) * 0.3 - 1]).clamp(-3, 3)  # fmt: skip
    test, train = data[::8], data
    settings = EnergySettings(steps=20, ais_chains=16, raise_chains=2, pilot_steps=10, num_leapfrog=5, seed=5)
    monitor = LikelihoodMonitor(test, energy=settings, train_data=train, history_path=tmp_path / "history.json")
    optimizer = torch.optim.SGD(energy.parameters(), lr=0.05)
    for epoch in range(3):
        negatives = (torch.rand(64, 2, generator=g, dtype=torch.float64) * 6 - 3).requires_grad_(True)
        for _ in range(10):  # short-run Langevin from uniform noise
            (grad,) = torch.autograd.grad(energy(negatives).sum(), negatives)
            negatives = (negatives - 0.05 * grad + 0.1 * torch.randn(negatives.shape, generator=g,
                         dtype=torch.float64)).clamp(-3, 3).detach().requires_grad_(True)  # fmt: skip
        optimizer.zero_grad()
        loss = energy(train).mean() - energy(negatives.detach()).mean()
        loss.backward()
        made = [p.grad.clone() for p in energy.parameters()]
        rec = monitor(epoch, model)
        assert all(torch.equal(p.grad, m) for p, m in zip(energy.parameters(), made))  # untouched by the monitor
        optimizer.step()
        assert rec.epoch == epoch and rec.exact is None  # no exact log Z given for a neural energy on a box
    assert len({r.log_z for r in monitor.history}) == 3  # the model changed between the records
    document = json.loads((tmp_path / "history.json").read_text())
    assert [r["epoch"] for r in document] == [0, 1, 2] and all(r["ais"] == r["ais"] for r in document)
    assert monitor.last_report.data["base"] == "fitted"


def test_a_small_discrete_energy_gets_its_exact_value_by_enumeration():
    model = neural_energy("binary", 5, seed=3)
    test = model.data_from_state(torch.randint(0, 2, (4, 5), generator=torch.Generator().manual_seed(2)))
    settings = EnergySettings(steps=20, ais_chains=64, raise_chains=4, seed=1)
    rec = LikelihoodMonitor(test, energy=settings)(0, model)
    log_z = exact_energy.log_partition(model)
    assert rec.log_z_exact == log_z
    assert rec.exact == pytest.approx(float(model.log_unnormalized(test).mean()) - log_z, abs=1e-9)


def test_a_certified_monitor_grows_k_until_the_sandwich_closes():
    model, log_z = gaussian_energy(2)
    test = _gaussian_test(model)
    settings = EnergySettings(steps=2, ais_chains=64, raise_chains=4, pilot_steps=20, seed=2)
    monitor = LikelihoodMonitor(test, energy=settings, until_gap=0.5, max_steps=80)
    rec = monitor(0, model)
    cert = monitor.last_certificate
    assert rec.verdict == cert.verdict == "closed" and [h.steps for h in cert.history] == [2, 4, 8]
    assert all(h.reasons_open for h in cert.history[:-1])  # open at K = 2 and 4: the gap above 0.5
    assert rec.ais == cert.history[-1].ais_mean and rec.raise_ == cert.history[-1].raise_mean
    assert cert.interval[0] <= float(model.log_unnormalized(test).mean()) - log_z <= cert.interval[1]


def test_the_monitor_draws_its_plot(tmp_path):
    pytest.importorskip("matplotlib")
    model, _ = gaussian_energy(2)
    monitor = LikelihoodMonitor(_gaussian_test(model), energy=CHEAP, plot_path=tmp_path / "sandwich.png")
    monitor(0, model)
    monitor(1, model)
    assert (tmp_path / "sandwich.png").stat().st_size > 0


def test_what_does_not_apply_is_refused_before_training(tiny_rbm):
    model, _ = gaussian_energy(2)
    test = _gaussian_test(model)
    binary = (torch.rand(6, tiny_rbm.n_visible, generator=torch.Generator().manual_seed(0)) < 0.5).float()
    with pytest.raises(SettingsError, match="train_data applies to an energy model's monitor: pass energy=True"):
        LikelihoodMonitor(binary, train_data=test)
    with pytest.raises(SettingsError, match=r"steps: an energy model's monitor takes its evaluation's settings in"):
        LikelihoodMonitor(test, energy=True, steps=200)
    with pytest.raises(SettingsError, match="train_data .* or base, not both"):
        LikelihoodMonitor(test, energy=True, train_data=test, base=GaussianBase(torch.zeros(2), torch.ones(2)))
    with pytest.raises(SettingsError, match="energy must be an EnergySettings"):
        LikelihoodMonitor(test, energy="hmc")
    with pytest.raises(SettingsError, match="track follows RBMs and DBMs; an energy model's monitor"):
        LikelihoodMonitor(test, energy=True, track=True)
    with pytest.raises(SettingsError, match="train_pixel_means are a Boltzmann machine's base rates"):
        LikelihoodMonitor(test, energy=True, train_pixel_means=torch.full((2,), 0.5))
    with pytest.raises(TypeError, match=r"made for one: LikelihoodMonitor\(test_examples, energy=True\)"):
        LikelihoodMonitor(binary)(0, neural_energy("binary", tiny_rbm.n_visible))
    with pytest.raises(TypeError, match="this monitor was made for an energy model"):
        LikelihoodMonitor(binary, energy=True)(0, tiny_rbm)


def test_an_energy_module_changed_to_another_dtype_in_training_is_refused_in_one_line(tmp_path):
    """`energy.double()` in the training loop after an EnergyModel was built in float32: the monitor fed float32
    states to float64 weights and failed inside torch ('mat1 and mat2 must have the same dtype'), its message
    pointing at the user's forward and a 'probe batch'; it is refused naming the parameter and both dtypes."""
    torch.manual_seed(0)
    energy = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.SiLU(), torch.nn.Linear(8, 1), torch.nn.Flatten(0))
    model = EnergyModel(_Wrapped(energy), event_shape=(2,))
    test = torch.randn(3, 2, generator=torch.Generator().manual_seed(1))
    monitor = LikelihoodMonitor(
        test, energy=CHEAP, train_data=torch.randn(50, 2, generator=torch.Generator().manual_seed(2))
    )
    monitor(0, model)
    energy.double()
    message = "energy's inner.0.weight is float64 on cpu, but the EnergyModel was built for float32 on cpu"
    with pytest.raises(ValueError, match=message):
        monitor(1, model)
    with pytest.raises(ValueError, match=message):
        raise_eval.certify(model, test, tolerance=1.0, steps=4, max_steps=4, ais_chains=4, raise_chains=2)
    monitor(2, EnergyModel(_Wrapped(energy), event_shape=(2,), dtype=torch.float64))  # built again: it runs


class _Wrapped(torch.nn.Module):
    """E(x) = inner(x) + |x|^2 (confining)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) + (x**2).sum(-1)


def test_a_monitor_of_real_valued_examples_made_without_energy_says_energy_true():
    """LikelihoodMonitor(real_examples) without energy=True (the energy model's monitor) was refused only with
    'binarize it first', advice that is wrong for an energy-based model's examples; the message now names
    energy=True."""
    test = torch.randn(4, 2, generator=torch.Generator().manual_seed(0))
    advice = r"binarize it first.*energy=True: LikelihoodMonitor\(test_examples, energy=True"
    with pytest.raises(ValueError, match=advice):
        LikelihoodMonitor(test)


@pytest.mark.parametrize(
    "given, shown", [(lambda m: "x", "'x'"), (lambda m: float("nan"), "nan"), (lambda m: torch.ones(2), "tensor")]
)
def test_an_exact_log_z_that_is_not_one_finite_number_is_refused_naming_exact_log_z(given, shown):
    """exact_log_z returning a string or a vector failed inside float() ('could not convert string to float') without
    naming exact_log_z, and a NaN was recorded as the exact value; each is refused naming exact_log_z, and None
    means 'not known' (the record's exact is None)."""
    model, _ = gaussian_energy(2)
    test = _gaussian_test(model)
    with pytest.raises(ValueError, match=rf"exact_log_z\(model\) must return one finite number .*got {shown}"):
        LikelihoodMonitor(test, energy=CHEAP, exact_log_z=given)(0, model)
    assert LikelihoodMonitor(test, energy=CHEAP, exact_log_z=lambda m: None)(0, model).exact is None
