"""The adaptive schedule: its shape, that it follows the exact thermodynamic length of the tiny models, and that
`evaluate(schedule="adaptive")` keeps the pilot's random numbers apart from the main runs'."""

import importlib
import json
import math
from pathlib import Path

import pytest
import torch

from raise_eval import BoltzmannPath, evaluate, exact, linear_schedule
from raise_eval.adaptive import adaptive_pilot, adaptive_schedule, pilot_run, schedule_from_increments
from raise_eval.cli import build_parser, main
from raise_eval.io.results import dump_json
from raise_eval.schedules import make_schedule, validate_schedule

# By module path: the package exports a function named evaluate.
evaluate_mod = importlib.import_module("raise_eval.evaluation.stages.pilot")  # where the pilot is run
ais_mod = importlib.import_module("raise_eval.estimators.ais")
raise_mod = importlib.import_module("raise_eval.estimators.raise_")
ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "checkpoints" / "rbm_digits_64-16.pt"
SMALL = dict(init="uniform", ais_chains=300, raise_examples=6, raise_chains=3, exact="never", log_f_samples=20)


def exact_increments(path: BoltzmannPath, grid: torch.Tensor) -> torch.Tensor:
    """The pilot's increments computed exactly: sd under p_{g_i} of log f_{g_(i+1)} - log f_{g_i}, by enumerating
    every configuration of the even layers (odd layers summed out), shaped (G,)."""
    model = path.model
    sizes = model.layer_sizes
    configs = exact.binary_configurations(sum(sizes[0::2])).to(model.dtype)
    layers, at = [], 0
    for l, n in enumerate(sizes):
        layers.append(configs[:, at : at + n] if l % 2 == 0 else None)
        at += n if l % 2 == 0 else 0
    state = path.state_from_layers(layers)
    log_f = torch.stack([path.log_density(state, float(b)).double() for b in grid])  # (G + 1, configurations)
    p = torch.softmax(log_f[:-1], 1)
    step = log_f[1:] - log_f[:-1]
    mean = (p * step).sum(1, keepdim=True)
    return (p * (step - mean) ** 2).sum(1).sqrt()


@pytest.mark.parametrize("k", [1, 2, 3, 10, 1000])
def test_shape_endpoints_and_strict_increase(tiny_rbm, k):
    betas = adaptive_schedule(BoltzmannPath(tiny_rbm), k, generator=torch.Generator().manual_seed(0))
    assert betas.dtype == torch.float64 and betas.shape == (k + 1,)
    assert betas[0].item() == 0.0 and betas[-1].item() == 1.0
    assert bool((betas.diff() > 0).all())
    assert torch.equal(validate_schedule(betas), betas)


def test_deterministic_given_the_pilot_seed(tiny_rbm):
    path = BoltzmannPath(tiny_rbm)

    def run(seed):
        return adaptive_schedule(path, 20, generator=torch.Generator().manual_seed(seed), num_chains=50)

    assert torch.equal(run(1), run(1))
    other = run(2)
    assert not torch.equal(run(1), other)  # another pilot, (slightly) other betas
    assert float((run(1) - other).abs().max()) < 0.05


@pytest.mark.parametrize("model_name", ["tiny_rbm", "tiny_chain"])
def test_the_pilot_measures_the_exact_thermodynamic_length(model_name, request):
    """The pilot's length and schedule agree with the ones computed exactly by enumeration (RBM and DBM paths)."""
    _check_against_exact_length(BoltzmannPath(request.getfixturevalue(model_name)))


def test_the_pilot_measures_the_exact_thermodynamic_length_of_a_dbm(tiny_dbm):
    _check_against_exact_length(BoltzmannPath(tiny_dbm))


def _check_against_exact_length(path):
    betas, pilot = adaptive_pilot(path, 20, generator=torch.Generator().manual_seed(3))
    truth = exact_increments(path, pilot.grid)
    assert pilot.length == pytest.approx(float(truth.sum()), rel=0.05)
    ideal = schedule_from_increments(pilot.grid, truth, 20)
    assert float((betas - ideal).abs().max()) < 0.02, (betas, ideal)


def test_steps_are_smallest_where_the_variance_is_largest(tiny_rbm):
    """On the multimodal RBM the exact sd per unit beta peaks near beta = 0.5 and is about half as large at
    beta = 0: the adaptive steps follow it inversely, the linear schedule ignores it."""
    path = BoltzmannPath(tiny_rbm)
    k = 20
    betas = adaptive_schedule(path, k, generator=torch.Generator().manual_seed(4))
    grid = linear_schedule(400)
    speed = exact_increments(path, grid) * 400  # sqrt of the Fisher information, per unit beta
    mids = ((betas[1:] + betas[:-1]) / 2 * 400).long().clamp_max(399)
    steps = betas.diff()
    # each step times the local speed is about constant (equal length), up to the 5% spread linearly
    length_per_step = steps * speed[mids]
    assert float(length_per_step.max() / length_per_step.min()) < 1.25
    assert float(speed.max() / speed.min()) > 1.8  # ...while the speed itself doubles along the path
    assert float(steps.max() / steps.min()) > 1.6
    peak = float(grid[speed.argmax()])
    assert abs(float(betas[steps.argmin()]) - peak) < 0.1


def test_schedule_from_increments_edge_cases():
    grid = linear_schedule(4)
    # all the length in the second cell: most steps go there, every cell keeps some
    betas = schedule_from_increments(grid, torch.tensor([0.0, 1.0, 0.0, 0.0]), 10, uniform_fraction=0.1)
    assert bool((betas.diff() > 0).all()) and betas[0] == 0 and betas[-1] == 1
    inside = ((betas > 0.25) & (betas < 0.5)).sum().item()
    assert inside >= 7
    assert float(betas.diff().max()) <= 1 / (0.1 * 10) + 1e-12  # at most 1 / (uniform_fraction K)
    # no variance anywhere, or a fully uniform mixture: the linear schedule
    torch.testing.assert_close(schedule_from_increments(grid, torch.zeros(4), 8), linear_schedule(8))
    torch.testing.assert_close(
        schedule_from_increments(grid, torch.tensor([5.0, 1.0, 0.0, 2.0]), 8, uniform_fraction=1.0),
        linear_schedule(8),
    )
    # equal increments on a linear grid: linear too
    torch.testing.assert_close(schedule_from_increments(grid, torch.ones(4), 6), linear_schedule(6))
    big = schedule_from_increments(
        linear_schedule(200), torch.rand(200, generator=torch.Generator().manual_seed(0)), 100_000
    )
    assert big.shape == (100_001,) and bool((big.diff() > 0).all())


def test_bad_arguments_are_refused(tiny_rbm):
    path = BoltzmannPath(tiny_rbm)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="num_steps must be an integer of at least 1"):
        adaptive_schedule(path, 0, generator=g)
    with pytest.raises(ValueError, match="num_chains"):
        pilot_run(path, num_chains=1, generator=g)
    with pytest.raises(ValueError, match="grid_size"):
        pilot_run(path, grid_size=0, generator=g)
    with pytest.raises(ValueError, match="uniform_fraction"):
        schedule_from_increments(linear_schedule(2), torch.ones(2), 3, uniform_fraction=0.0)
    with pytest.raises(ValueError, match="non-negative"):
        schedule_from_increments(linear_schedule(2), torch.tensor([1.0, -1.0]), 3)
    with pytest.raises(TypeError, match="Boltzmann"):
        pilot_run(object(), generator=g)
    with pytest.raises(ValueError, match="adaptive schedule needs a pilot run"):
        make_schedule("adaptive", 10)


def test_the_pilot_leaves_the_path_alone(tiny_rbm):
    """The pilot runs on its own copy of the path: the caller's path keeps its caches."""
    path = BoltzmannPath(tiny_rbm)
    path.at(0.25)
    cached = dict(path._at_cache)
    adaptive_schedule(path, 5, generator=torch.Generator().manual_seed(0), num_chains=10, grid_size=10)
    assert path._at_cache == cached


# ---------------------------------------------------------------- evaluate: the pilot's random numbers are its own


def _test_vectors(n_visible):
    return exact.binary_configurations(n_visible)[torch.arange(0, 2**n_visible, 7)]


@pytest.fixture
def recorded(monkeypatch):
    """What evaluate's random streams do: the pilot's generator and its state on entry, and every annealing pass
    of AIS and RAISE (heating included) with its generator and the generator's states on entry and on exit."""
    calls = {"pilot": [], "anneal": []}
    pilot = evaluate_mod.adaptive_pilot

    def recording_pilot(*args, generator, **kwargs):
        calls["pilot"].append((generator, generator.get_state()))
        return pilot(*args, generator=generator, **kwargs)

    monkeypatch.setattr(evaluate_mod, "adaptive_pilot", recording_pilot)
    for module in (ais_mod, raise_mod):
        anneal = module.anneal

        def recording_anneal(*args, generator, _anneal=anneal, **kwargs):
            entry = generator.get_state()
            out = _anneal(*args, generator=generator, **kwargs)
            calls["anneal"].append((kwargs.get("desc"), generator, entry, generator.get_state()))
            return out

        monkeypatch.setattr(module, "anneal", recording_anneal)
    return calls


def test_the_pilot_keeps_to_its_own_random_numbers_rbm(tiny_rbm, recorded):
    """Bit-identical AIS and RAISE weights, and the same generator states on entry to and exit from every annealing
    pass, as with the chosen betas passed explicitly: the pilot's generator (seed + 4) is an object of its own and
    the main runs never see it."""
    _check_pilot_isolation(tiny_rbm, tiny_rbm, recorded)


def test_the_pilot_keeps_to_its_own_random_numbers_dbm(tiny_dbm, recorded):
    """The same for a DBM (RAISE with heating)."""
    _check_pilot_isolation(tiny_dbm, tiny_dbm, recorded)


def test_the_pilot_keeps_to_its_own_random_numbers_dbn(tiny_dbn, recorded):
    """The same for a DBN: the pilot anneals the top RBM's path, as AIS and unrolled RAISE do."""
    _check_pilot_isolation(tiny_dbn, tiny_dbn.top, recorded)


def _check_pilot_isolation(model, annealed, recorded):
    test = _test_vectors(model.n_visible)
    adaptive = evaluate(model, test, schedule="adaptive", steps=12, seed=5, **SMALL)
    with_pilot = {k: list(v) for k, v in recorded.items()}
    recorded["pilot"].clear()
    recorded["anneal"].clear()
    betas = torch.tensor(adaptive.settings["schedule_betas"], dtype=torch.float64)
    explicit = evaluate(model, test, schedule=betas, seed=5, **SMALL)
    assert explicit.settings["schedule"] == "explicit" and explicit.settings["schedule_betas"] == betas.tolist()
    assert torch.equal(adaptive.ais.log_weights, explicit.ais.log_weights)
    assert torch.equal(adaptive.raise_.log_weights, explicit.raise_.log_weights)
    assert adaptive.raise_mean == explicit.raise_mean and adaptive.ais_mean == explicit.ais_mean
    assert recorded["pilot"] == [] and len(with_pilot["pilot"]) == 1
    pilot_generator, pilot_entry = with_pilot["pilot"][0]
    assert torch.equal(pilot_entry, torch.Generator().manual_seed(5 + 4).get_state())
    passes = with_pilot["anneal"]
    assert [p[0] for p in passes] == [p[0] for p in recorded["anneal"]] and len(passes) >= 2
    for (_, generator, entry, leave), (_, _, entry_explicit, leave_explicit) in zip(passes, recorded["anneal"]):
        assert generator is not pilot_generator
        assert torch.equal(entry, entry_explicit) and torch.equal(leave, leave_explicit)
    # the betas are the pilot's for seed + 4 on the annealed machine's path
    again = adaptive_schedule(BoltzmannPath(annealed), 12, generator=torch.Generator().manual_seed(9), num_chains=200)
    assert torch.equal(betas, again)


def test_adaptive_settings_json_and_table(tiny_rbm, tmp_path):
    test = _test_vectors(8)
    report = evaluate(tiny_rbm, test, schedule="adaptive", steps=15, **SMALL)
    s = report.settings
    assert s["schedule"] == "adaptive" and s["steps"] == 15
    assert (s["pilot_chains"], s["pilot_grid"], s["pilot_seed"]) == (200, 200, 4)
    assert len(s["schedule_betas"]) == 16 and s["pilot_thermodynamic_length"] > 0
    assert report.timing["pilot_seconds"] > 0
    assert "adaptive schedule (pilot: 200 chains" in report.format_table()
    out = tmp_path / "r.json"
    dump_json(report, str(out))
    doc = json.loads(out.read_text())
    assert doc["settings"]["schedule_betas"] == s["schedule_betas"]  # exact: JSON floats round-trip
    # fewer AIS chains than the default pilot: the pilot uses as many as AIS
    small = evaluate(tiny_rbm, test, schedule="adaptive", steps=3, **{**SMALL, "ais_chains": 40})
    assert small.settings["pilot_chains"] == 40
    custom = evaluate(tiny_rbm, test, schedule="adaptive", steps=3, pilot_chains=7, pilot_grid=9, **SMALL)
    assert (custom.settings["pilot_chains"], custom.settings["pilot_grid"]) == (7, 9)
    # a named schedule stores no betas
    assert "schedule_betas" not in evaluate(tiny_rbm, test, steps=3, **SMALL).settings


def test_evaluate_refuses_inconsistent_schedule_arguments(tiny_rbm):
    test = _test_vectors(8)
    with pytest.raises(ValueError, match="pilot_chains sets the pilot of schedule adaptive"):
        evaluate(tiny_rbm, test, schedule="linear", steps=3, pilot_chains=10, **SMALL)
    with pytest.raises(ValueError, match="explicit schedule has K = 2"):
        evaluate(tiny_rbm, test, schedule=torch.tensor([0.0, 0.5, 1.0]), steps=3, **SMALL)
    with pytest.raises(ValueError, match="must be one of linear, sigmoid, salakhutdinov, adaptive"):
        evaluate(tiny_rbm, test, schedule="cosine", steps=3, **SMALL)
    with pytest.raises(ValueError, match="pilot_chains must be an integer of at least 2"):
        evaluate(tiny_rbm, test, schedule="adaptive", steps=3, pilot_chains=1, **SMALL)
    with pytest.raises(ValueError, match="monotone"):
        evaluate(tiny_rbm, test, schedule=torch.tensor([0.0, 0.7, 0.2, 1.0]), **SMALL)


# ---------------------------------------------------------------- the command line


def test_cli_adaptive_schedule(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["--steps", "20", "--ais-chains", "100", "--raise-examples", "10", "--raise-chains", "2"]
    assert main(["evaluate", str(DIGITS), "--schedule", "adaptive", *args, "--no-progress", "--json", str(out)]) == 0
    assert "adaptive schedule (pilot: 100 chains" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    betas = doc["settings"]["schedule_betas"]
    assert len(betas) == 21 and betas[0] == 0.0 and betas[-1] == 1.0
    assert all(b > a for a, b in zip(betas[:-1], betas[1:]))
    assert doc["timing"]["pilot_seconds"] > 0 and math.isfinite(doc["log_likelihood"]["raise"]["mean"])


def test_cli_pilot_options(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", str(DIGITS), "--pilot-chains", "50", "--no-progress"])
    assert "--pilot-chains sets the pilot of --schedule adaptive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", str(DIGITS), "--schedule", "adaptive", "--pilot-grid", "0", "--no-progress"])
    assert "--pilot-grid must be an integer of at least 1, got 0" in capsys.readouterr().err
    text = build_parser()._subparsers._group_actions[0].choices["evaluate"].format_help()
    assert "adaptive" in text and "--pilot-chains" in text and "--pilot-grid" in text
    with pytest.raises(SystemExit):  # the VAE path has no adaptive pilot
        main(["bdmc", "vae.pt", "--schedule", "adaptive"])
    assert "--schedule must be one of linear, sigmoid, salakhutdinov, got 'adaptive'" in capsys.readouterr().err
