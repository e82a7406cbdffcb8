"""`raise_eval.certify` on a user's energy model: the certified loop of a Boltzmann machine (`certification.loop`)
runs `evaluate_energy` at K, 2K, ... until the sandwich closes (a Gaussian: its interval holds the truth, log f(v) -
log Z in closed form) or says why it is open (a base far from the model's mass, K capped)."""

from __future__ import annotations

import json

import pytest
import torch
from raise_eval.models.energy import GaussianBase

import raise_eval
from raise_eval.certification import Certificate
from tests.energy_models import gaussian_energy

QUICK = dict(ais_chains=64, raise_chains=8, pilot_steps=20, seed=3)


def _gaussian_test(model, n=6):
    g = torch.Generator().manual_seed(1)
    return model.energy.mean + 0.3 * torch.randn(n, model.n_visible, generator=g, dtype=torch.float64)


def test_a_gaussian_energy_is_certified_and_its_interval_holds_the_truth(tmp_path):
    model, log_z = gaussian_energy(3)
    test = _gaussian_test(model)
    truth = float((model.log_unnormalized(test) - log_z).mean())
    seen = []
    cert = raise_eval.certify(model, test, tolerance=0.5, steps=10, max_steps=160, on_step=seen.append, **QUICK)
    assert isinstance(cert, Certificate) and cert.verdict == "closed" and cert.reasons == []
    lo, hi = cert.interval
    assert lo <= truth <= hi, (lo, truth, hi)
    assert seen == cert.history and cert.history[-1].reasons_open == []
    assert all(b.steps == 2 * a.steps for a, b in zip(cert.history, cert.history[1:]))
    assert cert.model == model.describe() and cert.report.verdict == "closed"
    document = json.loads(json.dumps(cert.to_dict()))
    assert document["verdict"] == "closed" and document["interval"] == [lo, hi]
    assert document["last_evaluation"]["kernel"] == "hmc" and document["history"][-1]["steps"] == cert.history[-1].steps
    assert f"verdict: CLOSED at K = {cert.history[-1].steps:,}" in cert.format_table()
    # The last K's numbers are those of the evaluation at that K alone.
    alone = raise_eval.evaluate(model, test, steps=cert.history[-1].steps, tolerance=0.5, **QUICK)
    assert alone.upper_mean == cert.history[-1].ais_mean and alone.lower_mean == cert.history[-1].raise_mean


def test_an_energy_that_cannot_close_in_its_budget_says_open_with_reasons(tmp_path):
    """A base far from the model's mass and K capped at 8: AIS's weights rest on a few chains and the gap is wide;
    the certificate says open, with the verdict's reasons and the cap that stopped it."""
    model, _ = gaussian_energy(3)
    test = _gaussian_test(model)
    far = GaussianBase(model.energy.mean + 6.0, torch.full((3,), 0.2, dtype=torch.float64))
    cert = raise_eval.certify(model, test, tolerance=0.05, steps=2, max_steps=8, base=far, **QUICK)
    assert cert.verdict == "open" and cert.interval is None
    assert [s.steps for s in cert.history] == [2, 4, 8]
    reasons = " | ".join(str(r) for r in cert.reasons)
    assert "above the tolerance 0.05" in reasons and "the next K (16) would pass max_steps 8" in reasons
    assert "low-ess" in cert.history[-1].warnings
    # RAISE runs from every test vector: the advice says so, not --raise-examples (which an energy run refuses)
    assert any("(ais_chains, more test vectors, raise_chains)" in r for r in cert.to_dict()["reasons"])
    table = cert.format_table({"max_steps": "--max-steps"})
    assert "OPEN" in table and "would pass --max-steps 8" in table


def test_a_certified_energy_run_continues_from_its_file_and_refuses_another_model_s(tmp_path):
    model, _ = gaussian_energy(3)
    test = _gaussian_test(model)
    file = str(tmp_path / "cert.json")
    first = raise_eval.certify(model, test, tolerance=0.05, steps=4, max_steps=8, resume_file=file, **QUICK)
    again = raise_eval.certify(model, test, tolerance=0.05, steps=4, max_steps=8, resume_file=file, **QUICK)
    assert [vars(s) for s in again.history] == [vars(s) for s in first.history]
    assert any("read back from" in n for n in again.notes)
    other, _ = gaussian_energy(3, seed=5)
    with pytest.raises(ValueError, match="the model's parameters differ"):
        raise_eval.certify(other, test, tolerance=0.05, steps=4, max_steps=8, resume_file=file, **QUICK)
    with pytest.raises(ValueError, match="the base differs"):
        raise_eval.certify(model, test, tolerance=0.05, steps=4, max_steps=8, resume_file=file, train_data=test,
                           **QUICK)  # fmt: skip


def test_what_an_energy_model_s_certified_run_does_not_take_is_refused_by_name():
    model, _ = gaussian_energy(2)
    test = _gaussian_test(model, 2)
    with pytest.raises(ValueError, match="an energy model's certified run has no setting log_f_method"):
        raise_eval.certify(model, test, tolerance=0.1, log_f_method="exact")
    with pytest.raises(ValueError, match="train_pixel_means do not apply to an energy model's certified run"):
        raise_eval.certify(model, test, tolerance=0.1, train_pixel_means=torch.zeros(2))
    with pytest.raises(ValueError, match="kernel 'metropolis' does not apply to real support"):
        raise_eval.certify(model, test, tolerance=0.1, kernel="metropolis")
    with pytest.raises(ValueError, match="give train_data .* or base, not both"):
        raise_eval.certify(model, test, tolerance=0.1, train_data=test, base=object())


def test_a_certified_energy_run_refuses_the_file_of_another_parameter_free_energy(tmp_path):
    """Two parameter-free energies (2|x|^2 and 3|x|^2) have the same (empty) parameters: the second must not be
    continued from the first one's certified file."""

    def bowl(c):
        return lambda x: c * (x**2).sum(-1)

    test = 0.3 * torch.randn(3, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    file = str(tmp_path / "cert.json")
    run = dict(tolerance=0.05, steps=4, max_steps=4, resume_file=file, **QUICK)
    raise_eval.certify(raise_eval.EnergyModel(bowl(2.0), event_shape=(2,), dtype=torch.float64), test, **run)
    with pytest.raises(ValueError, match="the energy differs"):
        raise_eval.certify(raise_eval.EnergyModel(bowl(3.0), event_shape=(2,), dtype=torch.float64), test, **run)


def test_an_energy_certificate_s_json_history_names_the_settings_an_energy_model_has():
    """The JSON's top-level reasons said 'more test vectors' but each K's reasons_open in its history still named
    raise_examples, a setting an energy model's certify refuses; both say the energy model's words now."""
    model, _ = gaussian_energy(3)
    test = _gaussian_test(model)
    cert = raise_eval.certify(model, test, tolerance=0.001, steps=4, max_steps=4, **QUICK)
    d = cert.to_dict()
    assert any("more test vectors" in r for r in d["reasons"]), d["reasons"]
    opened = [r for step in d["history"] for r in step["reasons_open"]]
    assert any("more test vectors" in r for r in opened) and not any("raise_examples" in r for r in opened), opened


def test_a_closed_energy_table_says_which_side_each_end_of_its_interval_is():
    """RAISE above AIS within the noise: the evaluation's table said '(RAISE to AIS, ...)' while the certificate's
    said 'AIS to RAISE: RAISE came out above AIS, within the noise'; both say the latter now."""
    model = raise_eval.EnergyModel(lambda x: 2.0 * (x**2).sum(-1), event_shape=(2,))
    test = 0.5 * torch.randn(5, 2, generator=torch.Generator().manual_seed(0))
    cert = raise_eval.certify(model, test, tolerance=1.0, steps=10, max_steps=80, ais_chains=32, raise_chains=4)
    assert cert.closed and cert.report.lower_mean > cert.report.upper_mean  # the case this test is about
    assert "AIS to RAISE: RAISE came out above AIS" in cert.format_table()
    assert "(AIS to RAISE: RAISE came out above AIS, within the noise, ±2" in cert.report.format_table()


def test_a_certified_run_probes_the_fitted_base_and_enumerates_log_z_once(monkeypatch):
    """Neither the probe of a fitted base nor an enumerable energy's exact log Z depends on K, yet a certified run
    recomputed both at every K (the probe costs about as much as a short AIS). The first K's are handed on
    (`evaluation.energy.KIndependent`): each runs once, and the last K's report holds the numbers an evaluation at
    that K alone computes; one of another model, seed or base is refused."""
    import raise_eval.evaluation.energy as evaluation
    from tests.energy_models import TwoGaussians, neural_energy

    calls = {"probe": 0, "exact": 0}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(evaluation, "_base_probe", counted("probe", evaluation._base_probe))
    exact = evaluation.exact_energy
    monkeypatch.setattr(exact, "log_partition", counted("exact", exact.log_partition))
    energy = TwoGaussians(2, separation=12.0, std=1.0)
    model = raise_eval.EnergyModel(energy, event_shape=(2,), dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    train = energy.m + torch.randn(300, 2, generator=g, dtype=torch.float64)
    test = energy.m + torch.randn(4, 2, generator=g, dtype=torch.float64)
    run = dict(ais_chains=32, raise_chains=4, pilot_steps=10, seed=1)
    cert = raise_eval.certify(model, test, tolerance=0.01, steps=8, max_steps=32, train_data=train, **run)
    assert [s.steps for s in cert.history] == [8, 16, 32] and calls["probe"] == 1
    alone = raise_eval.evaluate(model, test, steps=32, tolerance=0.01, train_data=train, **run)
    assert calls["probe"] == 2 and cert.report.data["probe"] == alone.data["probe"]
    assert [w.code for w in cert.report.warnings] == [w.code for w in alone.warnings]
    assert "base-misses-mass" in cert.history[-1].warnings and "probe" not in cert.report.seconds
    assert cert.report.upper_mean == alone.upper_mean and cert.report.lower_mean == alone.lower_mean

    binary = neural_energy("binary", 5, seed=3)
    codes = torch.randint(0, 2, (4, 5), generator=torch.Generator().manual_seed(2))
    binary_test = binary.data_from_state(codes)
    cert = raise_eval.certify(binary, binary_test, tolerance=0.001, steps=4, max_steps=16, ais_chains=32,
                              raise_chains=4)  # fmt: skip
    assert len(cert.history) == 3 and calls["exact"] == 1
    assert all(s.exact_mean == cert.history[0].exact_mean for s in cert.history)
    known = cert.report.k_independent
    refused = "known .* belongs to another model, kernel, seed or base"
    with pytest.raises(ValueError, match=refused):
        evaluation.evaluate_energy(binary, binary_test, steps=4, seed=1, known=known)
    with pytest.raises(ValueError, match=refused):
        evaluation.evaluate_energy(neural_energy("binary", 5, seed=4), binary_test, steps=4, known=known)
    # a reviewer's finds: one from a run whose base was not fitted (so it has no probe) would have skipped a fitted
    # base's probe; and an energy repeatable only to rounding, as check_energy allows, stopped a certified run at its
    # second K when the key held the energy's values
    default_base = raise_eval.evaluate(model, test, steps=8, **run)
    with pytest.raises(ValueError, match=refused):
        evaluation.evaluate_energy(model, test, steps=8, train_data=train, known=default_base.k_independent, **run)
    # a second reviewer's: a base fitted to other training data (the probe is compared with that base's run)
    fitted = raise_eval.evaluate(model, test, steps=8, train_data=train, **run)
    with pytest.raises(ValueError, match=refused):
        evaluation.evaluate_energy(model, test, steps=8, train_data=0.1 * train + 3, known=fitted.k_independent, **run)
    # and the model and its report still pickle (a weak reference does not; it is left out)
    import pickle

    again = pickle.loads(pickle.dumps(fitted))
    assert again.k_independent.model is None and not again.k_independent.belongs_to(model, fitted.k_independent.key)
    assert pickle.loads(pickle.dumps(model)).describe() == model.describe()
    noisy = raise_eval.EnergyModel(lambda x: energy(x) + 1e-12 * torch.rand(x.shape[0], dtype=x.dtype),
                                   event_shape=(2,), dtype=torch.float64)  # fmt: skip
    cert = raise_eval.certify(noisy, test, tolerance=0.01, steps=8, max_steps=32, train_data=train, **run)
    assert [s.steps for s in cert.history] == [8, 16, 32]
