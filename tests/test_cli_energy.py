"""`raise-eval evaluate --model FILE.py:FACTORY` on a user's energy model: the table and the JSON, and broken user
code (an exception, NaN energies, a wrong output shape) refused before any estimate, naming the file and line; the
options that do not apply refused by name."""

from __future__ import annotations

import json
import math
import re
import textwrap

import numpy as np
import pytest

from raise_eval.cli import main

FACTORY = """
import torch
from raise_eval import EnergyModel


class Quadratic(torch.nn.Module):
    def forward(self, x):
        return 2.0 * (x ** 2).sum(-1){broken}


def make_model():
    return EnergyModel(Quadratic(), support="real", event_shape=(2,))
"""


def _files(tmp_path, broken=""):
    factory = tmp_path / "my_ebm.py"
    factory.write_text(textwrap.dedent(FACTORY.format(broken=broken)))
    rng = np.random.default_rng(0)
    np.save(tmp_path / "test.npy", 0.5 * rng.standard_normal((5, 2)))
    np.save(tmp_path / "train.npy", 0.5 * rng.standard_normal((100, 2)))
    return [f"{factory}:make_model", "--data", str(tmp_path / "test.npy"), "--train-data", str(tmp_path / "train.npy")]


FAST = ["--steps", "50", "--ais-chains", "32", "--raise-chains", "4", "--no-progress"]


def test_an_energy_model_from_the_user_s_file(tmp_path, capsys):
    model, *data = _files(tmp_path)
    out = tmp_path / "energy.json"
    assert main(["evaluate", "--model", model, *data, *FAST, "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "energy real(2) Quadratic" in table and "log Z (AIS)" in table and f"wrote {out}" in table
    test_file, train_file = data[1], data[3]
    assert f"5 test vectors ({test_file}); base fitted to 100 training vectors ({train_file})" in table
    assert "K = 50 (linear), 32 AIS chains, 4 RAISE chains per test vector, seed 0" in table
    assert "verdict (tolerance 1 nat): " in table and "\ntime: " in table
    document = json.loads(out.read_text())
    assert document["data"]["test_file"] == test_file and document["verdict"] in ("open", "closed")
    assert document["settings"]["steps"] == 50 and len(document["upper"]) == 5
    # log Z = log(2 pi / 4) for E = 2 |x|^2 in two dimensions; AIS within 4 of its standard errors (+ slack)
    assert abs(document["log_z"] - np.log(2 * np.pi / 4)) < 4 * document["log_z_stderr"] + 0.05


@pytest.mark.parametrize(
    "broken, message",
    [
        (" + torch.zeros(2, 5)", r"make_model\(\) in .*my_ebm.py raised ValueError: the energy raised RuntimeError: "
                                 r"The size of tensor a \(3\) must match .* at .*my_ebm.py, line 8"),
        (" * float('nan')", r"raised ValueError: the energy is NaN or -inf"),
        ("[:, None]", r"raised ValueError: the energy must return one energy per example, shaped \(3,\), got \(3, 1\)"),
    ],
    ids=["exception", "NaN", "shape"],
)
def test_broken_user_code_is_refused_before_any_estimate(tmp_path, capsys, broken, message):
    model, *data = _files(tmp_path, broken)
    out = tmp_path / "energy.json"
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "--model", model, *data, *FAST, "--json", str(out)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert not out.exists()


def test_options_that_do_not_apply_are_refused_by_name(tmp_path, capsys):
    model, *data = _files(tmp_path)
    for extra, message in (
        (["--max-steps", "100"], "--max-steps belongs to a certified run: give --until-gap TOL too"),
        (["--schedule", "sigmoid"], "--schedule does not apply to an energy model (--model)"),
        (["--alphabet", "dna"], "--alphabet applies to checkpoints' datasets, not to --model's files"),
    ):
        with pytest.raises(SystemExit):
            main(["evaluate", "--model", model, *data, *FAST, *extra])
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", "--model", model, *FAST])
    assert "--model needs --data FILE, a .npy/.npz file of test examples" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", "some.pt", "--model", model, *data])
    assert "give a CHECKPOINT or --model FILE.py:FACTORY (one of the two)" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --model forgotten (a new user's slip: it said the checkpoint does not exist)
        main(["evaluate", model, *data])
    assert f"{model} names a Python file, not a checkpoint: give your own model as --model {model}" \
        in capsys.readouterr().err  # fmt: skip
    with pytest.raises(SystemExit):  # the file alone: --model needs its factory too
        main(["evaluate", model.split(":")[0], *data])
    assert "is a Python file, not a checkpoint: give your own model as --model FILE.py:FACTORY" \
        in capsys.readouterr().err  # fmt: skip


def test_the_kernel_and_its_leapfrog_steps_are_chosen_from_the_command_line(tmp_path, capsys):
    """--kernel, --leapfrog and --pilot-steps (EnergySettings' declarations; a new user could choose them only in
    Python) reach the evaluation, its table and JSON, and a certified run's every K; a kernel that does not apply to
    the support, a bad count, and these options on a checkpoint are refused by name before any work."""
    model, *data = _files(tmp_path)
    out = tmp_path / "energy.json"
    args = ["evaluate", "--model", model, *data, *FAST]
    assert main([*args, "--leapfrog", "3", "--pilot-steps", "20", "--json", str(out)]) == 0
    assert "hmc, L = 3, step sizes from a pilot of up to 20 temperatures (acceptance" in capsys.readouterr().out
    document = json.loads(out.read_text())
    assert document["kernel"] == "hmc"
    assert (document["settings"]["num_leapfrog"], document["settings"]["pilot_steps"]) == (3, 20)
    assert main([*args, "--kernel", "mala", "--json", str(out), "--overwrite"]) == 0
    assert "\nkernel                   mala" in capsys.readouterr().out
    document = json.loads(out.read_text())
    assert document["kernel"] == document["settings"]["kernel"] == "mala"
    # what MALA does not read is recorded as None, not as the default it never used
    assert (document["settings"]["num_leapfrog"], document["settings"]["pilot_steps"]) == (None, 200)
    cert = ["--steps", "10", "--until-gap", "1", "--max-steps", "20", "--json", str(out), "--overwrite"]
    assert main([*args, "--kernel", "mala", *cert]) in (0, 3)
    capsys.readouterr()
    document = json.loads(out.read_text())
    assert document["last_evaluation"]["kernel"] == "mala"
    for extra, message in (
        (["--kernel", "metropolis"], "kernel 'metropolis' does not apply to real support; use one of hmc, mala"),
        (["--kernel", "nuts"], "--kernel must be one of auto, hmc, mala, metropolis, gibbs-with-gradients, got 'nuts'"),
        (["--leapfrog", "0"], "--leapfrog must be an integer of at least 1, got 0"),
    ):
        with pytest.raises(SystemExit) as stop:
            main([*args, *extra])
        assert stop.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "checkpoints/rbm_digits_64-16.pt", "--kernel", "hmc", "--leapfrog", "3"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--kernel, --leapfrog set the kernel of your own energy model" in err
    # options the kernel would not read are refused, not recorded as if used (a new user's find), before any work
    for extra, message in (
        (["--kernel", "mala", "--leapfrog", "5"], "--leapfrog sets HMC's leapfrog steps, and the kernel here is mala: "
                                                  "MALA is HMC with one leapfrog step; drop it"),
        (["--kernel", "mala", "--leapfrog", "5", "--until-gap", "1"], "the kernel here is mala"),
        # given at its default value too: the flag was meant to change the run (a second new user's find)
        (["--kernel", "mala", "--leapfrog", "10"], "--leapfrog sets HMC's leapfrog steps, and the kernel here is mala"),
    ):
        with pytest.raises(SystemExit) as stop:
            main([*args, *extra, "--json", str(tmp_path / "refused.json")])
        assert stop.value.code == 2 and message in capsys.readouterr().err
        assert not (tmp_path / "refused.json").exists()
    # a checkpoint's pilot option with --model is named as not applying (it was told about --schedule)
    with pytest.raises(SystemExit):
        main([*args, "--pilot-chains", "10"])
    assert "--pilot-chains does not apply to an energy model (--model)" in capsys.readouterr().err


def test_train_data_does_not_replace_a_base_the_model_carries(tmp_path, capsys):
    """A factory whose model carries its own base (chosen, say, to cover a mode the training data miss) and
    --train-data: refused, naming both ways out, before any work (the fitted base replaced it without a word, and a
    new user's certified verdict closed on the wrong value)."""
    model, *data = _files(tmp_path)
    factory = tmp_path / "based.py"
    text = textwrap.dedent(FACTORY.format(broken=""))
    text = text.replace("event_shape=(2,))", "event_shape=(2,), base=GaussianBase(torch.zeros(2), 3 * torch.ones(2)))")
    text = text.replace("from raise_eval import EnergyModel", "from raise_eval.models.energy import GaussianBase\n"
                        "from raise_eval import EnergyModel")  # fmt: skip
    factory.write_text(text)
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "--model", f"{factory}:make_model", *data, *FAST])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert "this model carries its own base (EnergyModel(..., base=...)), which a base fitted to --train-data would " \
           "replace: drop --train-data to anneal from the model's base" in err
    assert main(["evaluate", "--model", f"{factory}:make_model", *data[:2], *FAST]) == 0
    assert "the model's" in capsys.readouterr().out


def test_until_gap_certifies_an_energy_model_with_its_json_and_plot(tmp_path, capsys):
    """--until-gap grows K for an energy model as for an RBM (it was refused): a line per K, the last evaluation's
    table, the certificate's table, its JSON and the plot of AIS and RAISE against K; exit 0 when closed."""
    model, *data = _files(tmp_path)
    out, plot = tmp_path / "cert.json", tmp_path / "cert.png"
    args = ["evaluate", "--model", model, *data, *FAST, "--steps", "10", "--until-gap", "1", "--max-steps", "80"]
    assert main([*args, "--json", str(out), "--plot", str(plot)]) == 0
    shown = capsys.readouterr().out
    assert "K = 10: AIS " in shown and "certified sandwich of energy real(2) Quadratic, tolerance 1 nat" in shown
    assert "verdict: CLOSED at K = " in shown and "log Z (AIS)" in shown
    document = json.loads(out.read_text())
    assert document["verdict"] == "closed" and document["history"][0]["steps"] == 10
    assert document["last_evaluation"]["data"]["test_file"] == data[1]
    # log p(v) = log f(v) - log Z, log Z = log(2 pi / 4): the interval holds it
    test = np.load(data[1])
    truth = float(np.mean(-2.0 * (test**2).sum(-1)) - np.log(2 * np.pi / 4))
    assert document["interval"][0] <= truth <= document["interval"][1]
    assert plot.stat().st_size > 0
    # A budget it cannot close in: open, with its reasons, exit 3.
    assert main([*args[:-2], "--max-steps", "20", "--until-gap", "0.001"]) == 3
    shown = capsys.readouterr().out
    assert "verdict: OPEN" in shown and "the next K (40) would pass --max-steps 20" in shown
    assert "run more chains (--ais-chains, more test vectors, --raise-chains)" in shown


def test_an_interrupted_energy_run_continues_from_its_resume_file(tmp_path, capsys, monkeypatch, ctrl_c_raises):
    """--resume-file (refused for an energy model before): Ctrl-C during RAISE keeps the run (exit 130, no
    traceback), and the same command continues it to the numbers of an uninterrupted run, bit for bit; the cost
    estimate is printed before the work when the run is long (here: any run) and kept in the JSON."""
    import signal

    from raise_eval.cli import evaluate as evaluate_command
    from raise_eval.evaluation import energy as energy_evaluation

    model, *data = _files(tmp_path)
    whole, resumed, file = tmp_path / "whole.json", tmp_path / "resumed.json", tmp_path / "run.pt"
    assert main(["evaluate", "--model", model, *data, *FAST, "--json", str(whole)]) == 0
    capsys.readouterr()
    real, calls = energy_evaluation._Recording.__call__, []

    def counted(self, state, beta, generator):
        if len(calls) == 50 + 7:  # K = 50: AIS's 50 transitions, then RAISE's 8th
            signal.raise_signal(signal.SIGINT)
        calls.append(beta)
        return real(self, state, beta, generator)

    command = ["evaluate", "--model", model, *data, *FAST, "--resume-file", str(file), "--json", str(resumed)]
    with monkeypatch.context() as m:
        m.setattr(energy_evaluation._Recording, "__call__", counted)
        assert main(command) == 130
    out, err = capsys.readouterr()
    assert f"the run so far is kept in {file}: run the same command to continue" in out
    assert "raise-eval: interrupted during RAISE" in err and "Traceback" not in err
    assert json.loads(resumed.read_text())["complete"] is False  # what finished, marked incomplete; replaced below
    monkeypatch.setattr(evaluate_command, "LONG_RUN_SECONDS", 0.0)
    assert main(command) == 0
    out, err = capsys.readouterr()
    assert "raise-eval: estimated time " in err and "AIS " in err and "32 chains x 50 transitions" in err
    assert "note: continued from " in out and "raise shard 0 continued from step 8 (RAISE)" in out
    first, second = json.loads(whole.read_text()), json.loads(resumed.read_text())
    for key in ("log_z", "log_z_stderr", "upper", "lower", "acceptance", "gap", "verdict"):
        assert first[key] == second[key], key
    assert set(second["cost_estimate"]["per_stage"]) == {"pilot", "ais", "probe", "raise"}  # a fitted base: probed
    ais_work = second["cost_estimate"]["per_stage"]["ais"]["work"]
    assert ais_work == "32 chains x 50 transitions (10 forward-and-backward passes each)"


def test_a_data_file_that_is_missing_or_not_an_array_is_named_by_its_option(tmp_path, capsys):
    """A new user's findings (issue 43): a missing --train-data file was reported as "data file X does not exist",
    which does not say which option named it, and a .csv given to --data as "--model needs --data FILE", as if no
    --data had been given. Both before the model is built or anything is computed."""
    model, _, test, _, train = _files(tmp_path)
    missing = str(tmp_path / "missing.npy")
    for args, message in (
        (["--data", test, "--train-data", missing], f"--train-data {missing} does not exist"),
        (["--data", missing, "--train-data", train], f"--data {missing} does not exist"),
        (["--data", str(tmp_path / "test.csv"), "--train-data", train], f"--data {tmp_path / 'test.csv'} is not a "),
        (["--data", test, "--train-data", str(tmp_path / "train.csv")], f"--train-data {tmp_path / 'train.csv'} is "),
    ):
        with pytest.raises(SystemExit):
            main(["evaluate", "--model", model, *args, *FAST])
        err = capsys.readouterr().err
        assert message in err and "a .npy/.npz file" in err, err


def test_a_model_without_its_factory_name_is_shown_an_energy_factory(tmp_path, capsys):
    """A new user's finding (issue 43): `evaluate --model my_ebm.py` (no :FACTORY) pointed at the VAE example
    (examples/plain_vae_factory.py:make_model), which returns a decoder that evaluate refuses."""
    model, *data = _files(tmp_path)
    with pytest.raises(SystemExit):
        main(["evaluate", "--model", model.rpartition(":")[0], *data, *FAST])
    err = capsys.readouterr().err
    assert "give FILE.py:FACTORY" in err and "e.g. --model examples/torchebm_2d_factory.py:make" in err, err


@pytest.mark.parametrize(
    "value, message",
    [("float('nan')", r"the energy is NaN at example 1 of --data .*test.npy \(NaN at 2 of its 5 examples\)"),
     ("float('inf')", r"the energy is \+inf at example 1 of --data .*test.npy \(\+inf at 2 of its 5 examples\): E = "
                      r"\+inf gives the example probability zero")],
    ids=["NaN", "+inf"],
)
def test_an_energy_not_finite_at_a_test_example_is_refused_before_any_estimate(tmp_path, capsys, value, message):
    """A new user's finding (issue 43): an energy that is NaN (or +inf) only at some inputs passes the probe batch;
    at test examples it failed only after the pilot and AIS, as 'AIS: 3 NaN among 20 log-weights', naming neither
    the data nor the example. Its test examples are now tried before any work, the file and example named."""
    model, *data = _files(tmp_path, f" + torch.where(x[:, 0] > 10.0, {value}, 0.0)")
    test = np.load(data[1])
    test[[1, 3], 0] = 11.0  # the energy is not finite at examples 1 and 3 only
    np.save(data[1], test)
    out = tmp_path / "energy.json"
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "--model", model, *data, *FAST, "--json", str(out)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "log-weights" not in err, err
    assert not out.exists()


def test_a_float64_function_energy_that_fails_in_float32_is_told_to_give_dtype(tmp_path, capsys):
    """A new user's finding (issue 43): a function energy whose own tensors are float64, built with
    dtype=torch.float64, failed under the command's default --dtype float32 with only 'the energy raised
    RuntimeError ... at my_ebm.py, line 6 (...; fix it there)', pointing at correct code; the cause is --dtype."""
    _, *data = _files(tmp_path)
    factory = tmp_path / "my_ebm.py"  # in place of _files' factory
    factory.write_text(textwrap.dedent("""
        import torch
        from raise_eval import EnergyModel
        PRECISION = 4.0 * torch.eye(2, dtype=torch.float64)
        def energy(x):
            return 0.5 * ((x @ PRECISION) * x).sum(-1)
        def make_model():
            return EnergyModel(energy, support="real", event_shape=(2,), dtype=torch.float64)
    """))
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "--model", f"{factory}:make_model", *data, *FAST])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "the model was built in float64 and fails in float32 (--dtype, float32 by default): give --dtype " \
           "float64" in err and "fix it there" not in err, err
    assert main(["evaluate", "--model", f"{factory}:make_model", *data, *FAST, "--dtype", "float64"]) == 0


@pytest.mark.parametrize(
    "support, event_shape, array, message",
    [
        (("real", 0.0, 1.0), (1, 4, 4), np.arange(32).reshape(2, 1, 4, 4) * 8.0,
         r"must lie in the support's box real\[0, 1\], found 0..248: pixels 0..255\? scale them"),
        ("binary", (4,), np.array([[-1.0, 1.0, 1.0, -1.0]] * 3),
         r"must hold binary values 0/1 only, found -1/1: these are spin values; declare support='spin', or map them "
         r"with \(x \+ 1\) / 2"),
        ("spin", (4,), np.array([[0.0, 1.0, 1.0, 0.0]] * 3),
         r"must hold spin values -1/1 only, found 0/1: these are binary values; declare support='binary'"),
        ("binary", (4,), np.zeros((0, 4)), r"holds no examples \(an array shaped \(0, 4\)\): save at least one"),
        ("binary", (4,), np.zeros(4), r"holds an array shaped \(4,\); the model's examples are shaped \(4,\): save "
                                      r"them shaped \(N, 4\) \(one example: save x\[None\]\)"),
        ("categorical(3)", (4,), np.eye(3)[np.zeros((5, 4), dtype=int)],
         r"holds an array shaped \(5, 4, 3\); .* \(integer codes: x.argmax\(-1\) of one-hot examples\)"),
        ("real", (4,), np.array([[0.0] * 4, [0.0, np.nan, 0.0, 0.0]]),
         r"must hold finite real numbers, found NaN or infinite values in 1 of its examples \(the first: example 1\)"),
    ],
    ids=["pixels 0..255", "spins for binary", "binary for spin", "empty", "one example", "one-hot", "NaN"],
)
def test_a_data_file_off_the_support_is_told_how_to_fix_it(tmp_path, capsys, support, event_shape, array, message):
    """A new user's findings (issue 43): data that do not fit the declared support were refused without a way out
    ('must hold binary values 0/1 only' for -1/+1 data, 'must lie in the box real[0, 1], found 0..248' for 8-bit
    pixels, 'holds an array shaped (0, 4); the model's examples are (4)' for an empty file)."""
    factory = tmp_path / "my_ebm.py"
    factory.write_text(textwrap.dedent(f"""
        from raise_eval import EnergyModel
        from raise_eval.models import categorical
        def make_model():
            return EnergyModel(lambda x: (x ** 2).flatten(1).sum(-1), support={support if support == "categorical(3)"
                               else repr(support)}, event_shape={event_shape!r})
    """))
    np.save(tmp_path / "test.npy", array)
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "--model", f"{factory}:make_model", "--data", str(tmp_path / "test.npy"), *FAST])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert re.search(f"--data {re.escape(str(tmp_path / 'test.npy'))} " + message, err), err
    assert err.count("\n") == 1, err


def test_ctrl_c_shows_and_keeps_what_finished_without_a_resume_file(tmp_path, capsys, monkeypatch):
    """A new user's find: Ctrl-C during RAISE printed only 'interrupted during RAISE' and wrote no --json, so the
    finished AIS (log Z) was lost, where a checkpoint's evaluation shows and keeps what finished. Now the table shows
    the finished stages and the JSON is written, marked incomplete."""
    import raise_eval.evaluation.energy as evaluation

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluation, "_raise_stage", interrupted)
    model, *data = _files(tmp_path)
    out = tmp_path / "partial.json"
    assert main(["evaluate", "--model", model, *data, *FAST, "--json", str(out)]) == 130
    captured = capsys.readouterr()
    assert "interrupted during RAISE: no RAISE estimate and no verdict (finished: pilot" in captured.out
    assert "\nlog Z (AIS)" in captured.out and f"wrote {out} (marked incomplete)" in captured.out
    assert "raise-eval: interrupted during RAISE" in captured.err
    document = json.loads(out.read_text())
    assert document["complete"] is False and document["interrupted_during"] == "RAISE"
    assert math.isfinite(document["log_z"]) and document["log_z_stderr"] > 0 and document["kernel"] == "hmc"
