"""An energy model's evaluation with a resume file (`evaluate_energy(..., resume_file=FILE)`): Ctrl-C lets the step
finish, saves it and stops; a crash loses only the step it interrupted. Either way the same call continues from the
file, redoes no saved step, and gives the bits of an uninterrupted run (log Z, every test vector's upper and lower
estimates, the acceptance rates). A file written with other settings is refused, naming what differs."""

from __future__ import annotations

import signal

import pytest
import torch

from raise_eval.evaluation import energy as energy_evaluation
from raise_eval.evaluation.energy import EnergyInterrupted, EnergySettings, evaluate_energy
from raise_eval.settings import SettingsError
from tests.energy_models import gaussian_energy, neural_energy

STEPS = 12


def _case(kind: str):
    if kind == "hmc":
        model, _ = gaussian_energy(3)
        g = torch.Generator().manual_seed(1)
        test = model.energy.mean + 0.3 * torch.randn(4, 3, generator=g, dtype=torch.float64)
        return model, test, EnergySettings(steps=STEPS, ais_chains=16, raise_chains=3, pilot_steps=5, seed=2)
    model = neural_energy("binary", 5, seed=3)
    test = model.data_from_state(torch.randint(0, 2, (3, 5), generator=torch.Generator().manual_seed(2)))
    return model, test, EnergySettings(steps=STEPS, ais_chains=16, raise_chains=3, kernel=kind, seed=2)


def _stop_at_transition(monkeypatch, number: int, how: str) -> list:
    """Count the annealing's transitions (AIS's, then RAISE's); at call `number` (from 0) press Ctrl-C for real
    (SIGINT to this process: the step goes on) or crash before the step."""
    real, calls = energy_evaluation._Recording.__call__, []

    def counted(self, state, beta, generator):
        if len(calls) == number:
            if how == "crash":
                calls.append("crash")
                raise RuntimeError("simulated crash")
            signal.raise_signal(signal.SIGINT)
        calls.append(beta)
        return real(self, state, beta, generator)

    monkeypatch.setattr(energy_evaluation._Recording, "__call__", counted)
    return calls


@pytest.mark.parametrize(
    "kind, stage, number",
    [("hmc", "AIS", 5), ("hmc", "RAISE", STEPS + 4), ("gibbs-with-gradients", "RAISE", STEPS + 2)],
    ids=["hmc-AIS", "hmc-RAISE", "gwg-RAISE"],
)
@pytest.mark.parametrize("how", ["ctrl-c", "crash"])
def test_an_interrupted_energy_evaluation_continues_bit_for_bit(
    tmp_path, monkeypatch, kind, stage, number, how, ctrl_c_raises
):
    model, test, settings = _case(kind)
    whole = evaluate_energy(model, test, settings)
    file = tmp_path / "run.pt"
    with monkeypatch.context() as m:
        calls = _stop_at_transition(m, number, how)
        with pytest.raises(EnergyInterrupted if how == "ctrl-c" else RuntimeError) as stop:
            evaluate_energy(model, test, settings, resume_file=str(file), resume_interval=0.0)
    if how == "ctrl-c":
        assert stop.value.stage == stage and stop.value.saved
    assert len(calls) == number + 1
    saved = torch.load(file, weights_only=True)["running"]
    steps_done = number + 1 if how == "ctrl-c" else number  # Ctrl-C finishes its step; a crash loses it
    phase_start = 0 if stage == "AIS" else STEPS
    assert (saved["phase"], saved["step"]) == (stage, steps_done - phase_start)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler was put back
    with monkeypatch.context() as m:
        rerun = _stop_at_transition(m, -1, how)  # count only
        resumed = evaluate_energy(model, test, settings, resume_file=str(file), resume_interval=0.0)
    assert len(rerun) == 2 * STEPS - steps_done  # saved steps were not run again
    assert resumed.log_z == whole.log_z and resumed.log_z_stderr == whole.log_z_stderr
    assert torch.equal(resumed.upper, whole.upper) and torch.equal(resumed.lower, whole.lower)
    assert resumed.acceptance == whole.acceptance and resumed.verdict == whole.verdict
    assert [w.code for w in resumed.warnings] == [w.code for w in whole.warnings]
    continued = f"{stage.lower()} shard 0 continued from step {steps_done - phase_start} ({stage})"
    assert any(continued in note for note in resumed.notes), resumed.notes
    assert "running" not in torch.load(file, weights_only=True)  # both stages finished
    again = evaluate_energy(model, test, settings, resume_file=str(file))  # everything read back
    assert torch.equal(again.lower, whole.lower) and again.acceptance == whole.acceptance
    assert any("1 of 1 AIS shards read back" in note for note in again.notes), again.notes


def test_a_resume_file_of_other_settings_is_refused_naming_them(tmp_path):
    model, test, settings = _case("hmc")
    file = str(tmp_path / "run.pt")
    evaluate_energy(model, test, settings, resume_file=file)
    with pytest.raises(SettingsError, match="steps: 12 in the file, 24 now"):
        evaluate_energy(model, test, settings, resume_file=file, steps=24)
    with pytest.raises(SettingsError, match="the base differs"):
        evaluate_energy(model, test, settings, resume_file=file, train_data=test)
    other, _ = gaussian_energy(3, seed=5)
    with pytest.raises(SettingsError, match="the model's parameters differ"):
        evaluate_energy(other, test, settings, resume_file=file)


def test_an_interrupted_certified_energy_run_continues_bit_for_bit(tmp_path, monkeypatch, ctrl_c_raises):
    """`certify` with a resume file keeps the finished Ks (JSON) and the K in progress (`<file>.K<k>.pt`, the
    evaluation's own resume file): Ctrl-C during K = 16's AIS, then the same call, gives the uninterrupted run's
    history bit for bit."""
    import raise_eval
    from raise_eval.certification import CertifyInterrupted

    model, test, _ = _case("hmc")
    run = dict(tolerance=0.01, steps=4, max_steps=16, ais_chains=16, raise_chains=3, pilot_steps=5, seed=2)
    whole = raise_eval.certify(model, test, **run)
    file = tmp_path / "cert.json"
    with monkeypatch.context() as m:
        _stop_at_transition(m, 2 * 4 + 2 * 8 + 5, "ctrl-c")  # K = 4 and K = 8 finished, K = 16's AIS at step 6
        with pytest.raises(CertifyInterrupted) as stop:
            raise_eval.certify(model, test, resume_file=str(file), **run)
    assert [s.steps for s in stop.value.certificate.history] == [4, 8]
    assert "interrupted during K = 16 (AIS)" in stop.value.certificate.reasons[0]
    assert (tmp_path / "cert.json.K16.pt").exists()
    with monkeypatch.context() as m:
        rerun = _stop_at_transition(m, -1, "crash")
        resumed = raise_eval.certify(model, test, resume_file=str(file), **run)
    assert len(rerun) == 2 * 16 - 6  # the finished Ks and K = 16's saved steps were not run again
    keys = ("steps", "ais_mean", "ais_stderr", "raise_mean", "raise_stderr", "ais_ess", "warnings", "reasons_open")
    assert [[getattr(s, k) for k in keys] for s in resumed.history] == [
        [getattr(s, k) for k in keys] for s in whole.history
    ]
    assert any(n.startswith("K = 16: continued from") for n in resumed.notes), resumed.notes
    assert not (tmp_path / "cert.json.K16.pt").exists()  # K = 16 is kept in the certified file


class _Bowl(torch.nn.Module):
    """A parameter-free quadratic energy c |x|^2: two of them differ in their energy only, not in parameters."""

    def __init__(self, c: float):
        super().__init__()
        self.c = c

    def forward(self, x):
        return self.c * (x**2).sum(-1)


def test_a_resume_file_of_another_parameter_free_energy_is_refused(tmp_path):
    """Another model file whose energy has no parameters (2|x|^2, then 3|x|^2) was continued from the first one's
    file, mixing two models' chains; it is refused, naming the energy."""
    from raise_eval import EnergyModel

    test = 0.3 * torch.randn(3, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    settings = EnergySettings(steps=4, ais_chains=8, raise_chains=2, pilot_steps=3, seed=0)
    file = str(tmp_path / "run.pt")
    first = EnergyModel(_Bowl(2.0), event_shape=(2,), dtype=torch.float64)
    evaluate_energy(first, test, settings, resume_file=file)
    other = EnergyModel(_Bowl(3.0), event_shape=(2,), dtype=torch.float64)
    with pytest.raises(SettingsError, match="the energy differs"):
        evaluate_energy(other, test, settings, resume_file=file)
    evaluate_energy(EnergyModel(_Bowl(2.0), event_shape=(2,), dtype=torch.float64), test, settings, resume_file=file)


def test_an_evaluation_s_and_a_certified_run_s_resume_files_are_told_apart(tmp_path):
    """An evaluation's resume file given to a certified run was refused with "... is not a certified run's resume
    file ('utf-8' codec can't decode byte 0x80 ...)", and a certified run's given to an evaluation with
    "(UnpicklingError)"; each now says which kind of run wrote it."""
    import raise_eval

    model, test, settings = _case("hmc")
    evaluation_file, certified_file = str(tmp_path / "run.pt"), str(tmp_path / "cert.json")
    evaluate_energy(model, test, settings, resume_file=evaluation_file)
    run = dict(tolerance=1.0, steps=4, max_steps=4, ais_chains=16, raise_chains=3, pilot_steps=5, seed=2)
    raise_eval.certify(model, test, resume_file=certified_file, **run)
    with pytest.raises(ValueError, match="is the resume file of an evaluation, not of a certified run"):
        raise_eval.certify(model, test, resume_file=evaluation_file, **run)
    with pytest.raises(SettingsError, match="is a certified run's resume file"):
        evaluate_energy(model, test, settings, resume_file=certified_file)
