"""scripts/measure_trajectory_adaptive.py's exact cache (resumed across calls, every Nth checkpoint) and its comparison
of a `raise-eval trajectory --json` run with the exact values it knows (issue 44's Potts and CD-1 measurements)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from raise_eval import exact, save_checkpoint
from raise_eval.cli import main
from tests.estimators.test_trajectory import random_walk
from tests.scripts.test_reproduce_raise_tables import load_script


def test_exact_cache_resumes_and_compare_reads_a_trajectory_run(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    models = random_walk((8, 6), checkpoints=5, seed=1)
    for step, model in zip([0, 10, 20, 30, 40], models):
        save_checkpoint(
            folder / f"rbm_step{step}.pt", model.to(dtype=torch.float32), {"step": step}, torch.full((8,), 0.4)
        )
    data = tmp_path / "test.npy"
    np.save(data, (np.random.default_rng(0).random((30, 8)) < 0.5).astype(np.float32))
    script = load_script("measure_trajectory_adaptive")
    common = [str(folder), "--out", str(tmp_path / "m"), "--data", str(data)]
    script.main([*common, "--part", "exact", "--exact-every", "2", "--exact-budget", "0"])  # stops after one
    cache = json.loads((tmp_path / "m" / "exact.json").read_text())
    assert cache["steps"] == [0, 10, 20, 30, 40] and sum(v is not None for v in cache["log_z"]) == 1
    script.main([*common, "--part", "exact", "--exact-every", "2"])  # goes on: every 2nd and the last
    cache = json.loads((tmp_path / "m" / "exact.json").read_text())
    truth = [exact.log_partition(m.to(dtype=torch.float32)) for m in models]
    assert [v is None for v in cache["log_z"]] == [False, True, False, True, False]
    for i in (0, 2, 4):
        assert cache["log_z"][i] == pytest.approx(truth[i], abs=1e-9)
    run = tmp_path / "run.json"
    code = main(["trajectory", str(folder), "--data", str(data), "--steps", "5", "--ais-chains", "100",
                 "--raise-examples", "4", "--raise-chains", "2", "--bootstrap", "10", "--exact", "never",
                 "--no-progress", "--threads", "1", "--json", str(run)])  # fmt: skip
    assert code in (0, 3)
    script.main([*common, "--part", "compare", "--json", str(run)])
    result = json.loads((tmp_path / "m" / "compare.json").read_text())
    doc = json.loads(run.read_text())
    assert result["compared_steps"] == [0, 20, 40] and result["count"] == 3 and result["checkpoints"] == 5
    assert result["errors"] == pytest.approx([doc["checkpoints"][i]["log_z"] - truth[i] for i in (0, 2, 4)], abs=1e-9)
    assert result["seconds"] == doc["timing"]["seconds"]
    last = doc["checkpoints"][-1]
    assert result["final"]["exact"] == pytest.approx(last["log_f_mean"] - truth[-1], abs=1e-9)  # log f(v) exact
    with pytest.raises(SystemExit):
        script.main([*common, "--part", "compare"])  # no --json
    assert "--part compare reads a trajectory run's --json FILE" in capsys.readouterr().err


def test_temperature_part_on_a_potts_run_against_exact(tmp_path):
    """--part temperature on a typed (Potts) run, its start fitted to --train-data (it read only binarized MNIST
    runs): every checkpoint's SMC estimate within 0.1 nats of the exact log Z, and at least 2 of the 3 within 2 of
    their standard errors (a seed where that fails by chance: about 1 in 100)."""
    from tests.trajectories import write_potts_run

    folder, walk, test, train = write_potts_run(tmp_path)
    script = load_script("measure_trajectory_adaptive")
    common = [str(folder), "--out", str(tmp_path / "m"), "--data", str(test), "--train-data", str(train)]
    script.main([*common, "--part", "exact"])
    script.main([*common, "--part", "temperature", "--temperature-steps", "20"])
    result = json.loads((tmp_path / "m" / "temperature.json").read_text())
    assert result["exact_log_z"] == pytest.approx([float(exact.log_partition(m)) for m in walk], abs=1e-5)
    run = result["20"]
    assert run["count"] == 3 and run["within_2se"] >= 2 and run["max_abs"] < 0.1
