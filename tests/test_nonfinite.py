"""Log-weights that turn NaN or +inf stop the run with the stage named and keep what finished (issue 45, bug 6);
-inf, a weight of zero, is legitimate."""

import json
import math
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from raise_eval.models import RBM

import raise_eval.evaluation.run as evaluation_run
from raise_eval.annealing import CHECK_EVERY, NonFiniteLogWeightError, anneal, check_log_weights
from raise_eval.cli import main
from raise_eval.paths.boltzmann import BoltzmannPath
from raise_eval.schedules import linear_schedule

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "checkpoints" / "rbm_digits_64-16.pt"
QUICK = ["--steps", "20", "--ais-chains", "50", "--raise-examples", "5", "--raise-chains", "5", "--threads", "1",
         "--no-progress"]  # fmt: skip


class _ToyPath:
    """Chains that never move; the weight update of chain 0 is `bad` from step `from_step` on (1-based), 0 else."""

    def __init__(self, bad: float, from_step: int, num_steps: int):
        self.bad, self.from_step, self.num_steps = bad, from_step, num_steps

    def transition(self, state, beta, generator):
        return state

    def log_density_ratio(self, state, beta_from, beta_to):
        out = torch.zeros(state.shape[0], dtype=torch.float64)
        if round(beta_to * self.num_steps) >= self.from_step:
            out[0] = self.bad
        return out


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_anneal_stops_on_nan_or_plus_inf_naming_the_pass_and_the_steps(bad):
    path = _ToyPath(bad, from_step=150, num_steps=300)
    with pytest.raises(NonFiniteLogWeightError) as failed:
        anneal(path, torch.zeros(4), linear_schedule(300), generator=torch.Generator(), desc="reverse AIS")
    e = failed.value
    assert e.stage == "reverse AIS" and e.steps == (CHECK_EVERY + 1, 2 * CHECK_EVERY) and e.num_steps == 300
    word = "NaN" if math.isnan(bad) else "+inf"
    assert str(e).startswith(f"reverse AIS: 1 {word} among 4 log-weights between steps 101 and 200 of 300")
    # a pass shorter than CHECK_EVERY is checked at its end
    with pytest.raises(NonFiniteLogWeightError, match="between steps 1 and 20 of 20"):
        anneal(_ToyPath(bad, 5, 20), torch.zeros(4), linear_schedule(20), generator=torch.Generator())


def test_a_zero_weight_is_legitimate_but_an_estimate_of_zero_weights_is_not():
    # -inf: a state of probability zero under the next distribution, a weight of zero; the loop goes on
    _, log_w = anneal(_ToyPath(-math.inf, 3, 10), torch.zeros(3), linear_schedule(10), generator=torch.Generator())
    assert log_w[0] == -math.inf and bool((log_w[1:] == 0).all())
    check_log_weights(log_w, "AIS", chains_dim=-1)  # other chains carry the estimate
    with pytest.raises(NonFiniteLogWeightError, match=r"RAISE: every chain's weight is zero .* in 1 of 2 estimates"):
        check_log_weights(torch.tensor([[0.0, -math.inf], [-math.inf, -math.inf]]), "RAISE", chains_dim=1)


@pytest.fixture
def poisoned_path(monkeypatch):
    """After `switch["on"] = True`, the Boltzmann path's weight update gives chain 0 a NaN increment."""
    switch = {"on": False}
    real = BoltzmannPath._log_ratio

    def log_ratio(self, state, beta_from, beta_to, keep_probs):
        ratio, state = real(self, state, beta_from, beta_to, keep_probs)
        if switch["on"]:
            ratio = ratio.clone()
            ratio.view(-1)[0] = math.nan
        return ratio, state

    monkeypatch.setattr(BoltzmannPath, "_log_ratio", log_ratio)
    return switch


def _poison_raise_stage(monkeypatch, switch, from_call: int = 1):
    """Turn the poison on from the `from_call`-th RAISE stage on (AIS and earlier stages stay finite)."""
    real = evaluation_run.raise_stage
    calls = {"n": 0}

    def raise_stage(*args, **kwargs):
        calls["n"] += 1
        switch["on"] = calls["n"] >= from_call
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation_run, "raise_stage", raise_stage)


def test_evaluate_stops_on_nan_in_raise_and_keeps_ais(poisoned_path, monkeypatch, tmp_path, capsys):
    _poison_raise_stage(monkeypatch, poisoned_path)
    out = tmp_path / "e.json"
    assert main(["evaluate", str(DEFAULT), *QUICK, "--json", str(out)]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert not re.search(r"(^|\s)nan(\s|$)", captured.out, re.MULTILINE)  # no NaN became a number in the table
    err = captured.err.strip().splitlines()
    assert err[-1].startswith("raise-eval: error: RAISE failed: RAISE: 1 NaN among 25 log-weights between steps 1 and "
                              "20 of 20")  # fmt: skip
    assert "stopped during RAISE by an error" in captured.out and "marked incomplete" in captured.out
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["interrupted_during"] == "RAISE" and "1 NaN" in doc["error"]
    assert doc["log_z"]["ais"]["estimate"] is not None and doc["log_likelihood"]["ais"]["mean"] is not None
    assert doc["log_likelihood"]["raise"] is None


def test_certify_stops_on_nan_and_keeps_the_finished_ks(poisoned_path, monkeypatch, tmp_path):
    from raise_eval.certification import CertifyFailed, certify

    _poison_raise_stage(monkeypatch, poisoned_path, from_call=2)
    model = RBM.random(10, 6, weight_std=0.3, bias_std=0.5, generator=torch.Generator().manual_seed(7))
    test = (torch.rand(20, 10, generator=torch.Generator().manual_seed(8)) < 0.5).float()
    with pytest.raises(CertifyFailed) as failed:
        certify(model, test, steps=10, max_steps=40, tolerance=1e-9, ais_chains=20, raise_examples=5,
                raise_chains=2, init="uniform", threads=1, progress=False)  # fmt: skip
    cert = failed.value.certificate
    assert cert.verdict == "failed" and [h.steps for h in cert.history] == [10]
    assert cert.reasons[0].startswith("K = 20 stopped during RAISE: RAISE: 1 NaN among 10 log-weights")
    assert "FAILED (no verdict)" in cert.format_table() and failed.value.report.ais is not None


NANVAE = '''
import os

import torch
from torch import nn
from raise_eval import DecoderModel


class NaNDecoder(nn.Module):
    """Bernoulli logits of z; NaN where z[0] > 1 once switched on: from the 7th call, or when NANVAE_NOW is set."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 16)
        self.calls = 0

    def forward(self, z):
        self.calls += 1
        out = self.linear(z)
        if self.calls >= 7 if self.switch == "later" else os.environ.get("NANVAE_NOW"):
            out = torch.where(z[..., :1] > 1, torch.full_like(out, float("nan")), out)
        return out


def make(switch):
    decoder = NaNDecoder()
    decoder.switch = switch
    return DecoderModel(decoder, latent_dim=4, likelihood="bernoulli", data_dim=16)


def make_nan_later():
    return make("later")


def make_nan_on_demand():
    return make("env")
'''


@pytest.fixture
def nanvae(tmp_path):
    path = tmp_path / "nanvae.py"
    path.write_text(textwrap.dedent(NANVAE))
    return path


def test_bdmc_with_a_decoder_that_turns_nan_fails_naming_the_stage(nanvae, tmp_path, capsys):
    """The issue's command: exit 1 (was 0 with a table of nan), JSON marked incomplete."""
    out = tmp_path / "b.json"
    argv = ["bdmc", "--model", f"{nanvae}:make_nan_later", "--steps", "10", "100", "--examples", "8", "--chains", "2",
            "--threads", "1", "--no-progress", "--json", str(out)]  # fmt: skip
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "raise-eval: error: BDMC at K=10 failed: NonFiniteLogWeightError: AIS: " in captured.err
    assert not re.search(r"(^|\s)nan(\s|$)", captured.out, re.MULTILINE)
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["interrupted_during"] == "BDMC at K=10" and doc["simulated"]["bdmc"] == {}


def test_bdmc_keeps_the_finished_k_when_a_later_one_turns_nan(nanvae, tmp_path, capsys, monkeypatch):
    import raise_eval.bidirectional.run as bdmc_run

    real = bdmc_run.bdmc

    def bdmc(path, start, betas, *args, **kwargs):
        if betas.numel() - 1 == 20:
            monkeypatch.setenv("NANVAE_NOW", "1")
        return real(path, start, betas, *args, **kwargs)

    monkeypatch.setattr(bdmc_run, "bdmc", bdmc)
    out = tmp_path / "b.json"
    argv = ["bdmc", "--model", f"{nanvae}:make_nan_on_demand", "--steps", "5", "20", "--examples", "8", "--chains",
            "2", "--threads", "1", "--no-progress", "--leapfrog", "3", "--pilot-chains", "2", "--json", str(out)]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "raise-eval: error: BDMC at K=20 failed: NonFiniteLogWeightError: AIS: " in captured.err
    assert "between steps 1 and 20 of 20" in captured.err
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["interrupted_during"] == "BDMC at K=20"
    assert list(doc["simulated"]["bdmc"]) == ["5"] and math.isfinite(doc["simulated"]["bdmc"]["5"]["lower"]["mean"])


def test_importance_estimates_name_their_stage(nanvae, monkeypatch):
    from raise_eval.estimators.importance import elbo
    from raise_eval.io.user_model import build_user_model

    model = build_user_model(f"{nanvae}:make_nan_on_demand")
    monkeypatch.setenv("NANVAE_NOW", "1")  # after the construction check
    x = torch.ones(3, 16)

    class Broad:  # a proposal whose draws reach z[0] > 1
        def sample(self, x, k, generator):
            return 3 * torch.randn(x.shape[0], k, 4, generator=generator)

        def log_prob(self, x, z):
            return torch.zeros(z.shape[:2])

    with pytest.raises(NonFiniteLogWeightError, match="^the ELBO: [0-9]+ NaN among 60 log-weights"):
        elbo(model, x, Broad(), 20, generator=torch.Generator().manual_seed(0))


def test_the_cli_turns_a_bare_nonfinite_error_into_one_line(monkeypatch, capsys):
    """Where no partial report is kept (the cost estimate's trial steps, trajectory): one line, exit status 1."""
    import raise_eval.cli.evaluate as evaluate_cli
    import raise_eval.cli.trajectory as trajectory_cli

    def fails(*args):
        raise NonFiniteLogWeightError("AIS", "1 NaN among 4 log-weights", "check the model", (1, 3), 3)

    monkeypatch.setattr(evaluate_cli, "estimate_cost", fails)
    assert main(["evaluate", str(DEFAULT), *QUICK]) == 1
    assert capsys.readouterr().err == ("raise-eval: error: the cost estimate's trial steps (before the run): AIS: 1 NaN "
                                       "among 4 log-weights between steps 1 and 3 of 3 (check the model)\n")  # fmt: skip
    monkeypatch.setattr(trajectory_cli, "run", fails)
    assert main(["trajectory", "any-folder"]) == 1
    assert capsys.readouterr().err.startswith("raise-eval: error: AIS: 1 NaN among 4 log-weights between steps 1")


def test_rbm_accepts_numpy_arrays_with_their_dtype():
    w, b, c = np.full((4, 3), 0.5), np.zeros(4), np.ones(3)
    model = RBM(w, b, c)
    assert model.W.dtype == torch.float64 and model.W.device.type == "cpu"
    w[0, 0] = 9.0  # a copy: the array's later changes do not reach the model
    assert float(model.W[0, 0]) == 0.5
    assert torch.equal(RBM(w.astype(np.float32), b.astype(np.float32), c.astype(np.float32)).W.to(torch.float64),
                       torch.from_numpy(w))  # fmt: skip
    with pytest.raises(ValueError, match=r"biases\[0\] is torch.float32 on cpu but weights\[0\] is torch.float64"):
        RBM(w, torch.zeros(4), torch.zeros(3))
    with pytest.raises(TypeError, match=r"weights\[0\] must be a torch.Tensor or a numpy array, got list"):
        RBM([[0.0] * 3] * 4, b, c)


def test_hmc_names_a_decoder_that_ignores_z():
    from torch import nn

    from raise_eval import DecoderModel

    class Constant(nn.Module):
        def __init__(self):
            super().__init__()
            self.logits = nn.Parameter(torch.zeros(16))

        def forward(self, z):
            return self.logits.expand(z.shape[0], 16)

    z = torch.randn(5, 4)
    for decoder, name in ((Constant(), "Constant"), (lambda z: torch.zeros(z.shape[0], 16), "<lambda>")):
        model = DecoderModel(decoder, latent_dim=4, likelihood="bernoulli", data_dim=16)
        with pytest.raises(ValueError, match=rf"log p\(x \| z\) of the DecoderModel \(decoder {name}\) does not "
                                             "depend on z"):  # fmt: skip
            model.log_likelihood_and_grad(torch.ones(5, 16), z)


def test_trajectory_stops_on_nan_in_its_ais_pass_with_one_line(tmp_path, monkeypatch, capsys):
    """`trajectory` keeps no partial report (neither at Ctrl-C): the stage and steps in one line, exit status 1."""
    from raise_eval.models.io.checkpoints import save_checkpoint

    from raise_eval.paths.trajectory import TrajectoryPath
    from tests.trajectories import random_walk

    folder = tmp_path / "run"
    folder.mkdir()
    for step, model in zip([20, 300], random_walk((8, 6), checkpoints=2, seed=1)):
        save_checkpoint(folder / f"rbm_step{step}.pt", model.to(dtype=torch.float32), metadata={"step": step})
    data = tmp_path / "test.npy"
    np.save(data, (np.random.default_rng(0).random((20, 8)) < 0.5).astype(np.float32))
    real = TrajectoryPath.weight_update

    def weight_update(self, state, beta_from, beta_to):
        ratio, state = real(self, state, beta_from, beta_to)
        if beta_to > 0.6:
            ratio = ratio.clone()
            ratio.view(-1)[0] = math.nan
        return ratio, state

    monkeypatch.setattr(TrajectoryPath, "weight_update", weight_update)
    argv = ["trajectory", str(folder), "--data", str(data), "--steps", "5", "--ais-chains", "20", "--raise-examples",
            "5", "--raise-chains", "2", "--bootstrap", "5", "--init", "uniform", "--no-progress", "--threads", "1"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("raise-eval: error: AIS along the trajectory: 1 NaN among 20 log-weights between "
                                   "steps 1 and ")  # fmt: skip
    assert len(captured.err.splitlines()) == 1 and "Traceback" not in captured.err


def test_log_f_that_overflows_stops_the_run_naming_it(tmp_path, capsys):
    """Finite weights too large for float32 (a new user's N(0, 1e37) RBM): log f(v) overflows; the run stops in one
    line naming log f(v) and keeps what finished, as for NaN log-weights (it said 'the control variate X has
    non-finite entries' with exit 2 and no JSON)."""
    g = np.random.default_rng(0)
    path = tmp_path / "huge.npz"
    np.savez(path, W=(g.standard_normal((64, 16)) * 1e37).astype(np.float32), vbias=np.zeros(64, np.float32),
             hbias=np.zeros(16, np.float32))  # fmt: skip
    out = tmp_path / "huge.json"
    code = main(["evaluate", str(path), "--data", "digits", *QUICK, "--init", "uniform", "--exact", "never",
                 "--json", str(out)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 1 and "Traceback" not in captured.err
    assert "log f(v): the test vectors' log f(v) is NaN or infinite in 2 of 360 entries" in captured.err
    assert "overflow" in captured.err
    assert not re.search(r"(^|\s)(nan|inf|-inf)(\s|$)", captured.out, re.MULTILINE)  # no such number in the table
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and "log f(v)" in doc["error"] and doc["log_likelihood"]["ais"]["mean"] is None
