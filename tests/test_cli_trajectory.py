"""`raise-eval trajectory DIR`: a folder read in order (names or manifest), checked as one model's trajectory; the
table, JSON, plot and exit status; and the folders it refuses."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch
from raise_eval.models import DBM, RBM
from raise_eval.models.io.checkpoints import save_checkpoint

from raise_eval.cli import main
from raise_eval.io.trajectory_files import MANIFEST, TrajectoryFile, list_trajectory, thin_trajectory, write_manifest
from tests.trajectories import random_walk

FAST = ["--steps", "5", "--ais-chains", "200", "--raise-examples", "10", "--raise-chains", "4", "--bootstrap", "20",
        "--init", "uniform", "--no-progress", "--threads", "1"]  # fmt: skip


@pytest.fixture
def run_folder(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    # written out of order, with names whose numbers (not their text order) give training order
    for step, model in zip([1000, 20, 300], random_walk((8, 6), checkpoints=3, seed=1)):
        save_checkpoint(folder / f"rbm_step{step}.pt", model.to(dtype=torch.float32), metadata={"step": step})
    data = tmp_path / "test.npy"
    np.save(data, (np.random.default_rng(0).random((50, 8)) < 0.5).astype(np.float32))
    return folder, data


def test_table_json_plot_and_order(run_folder, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    folder, data = run_folder
    out = tmp_path / "t.json"
    code = main(["trajectory", str(folder), "--data", str(data), *FAST, "--json", str(out)])
    table = capsys.readouterr().out
    assert code in (0, 3)
    assert "3 checkpoints of a 8-6 RBM" in table and "verdict on the last checkpoint (step 1000" in table
    doc = json.loads(out.read_text())
    assert [c["step"] for c in doc["checkpoints"]] == [20, 300, 1000]
    assert doc["settings"]["checkpoints"] == ["rbm_step20.pt", "rbm_step300.pt", "rbm_step1000.pt"]
    assert (tmp_path / "t.png").exists()
    assert code == (0 if doc["verdict"] == "closed" else 3)


def test_thinning_keeps_checkpoints_the_gap_apart_and_the_last():
    entries = [TrajectoryFile(path=None, step=s) for s in range(0, 15001, 50)]  # 301 checkpoints, every 50 updates
    assert [e.step for e in thin_trajectory(entries, 7500)] == [0, 7500, 15000]
    assert [e.step for e in thin_trajectory(entries, 7000)] == [0, 7000, 15000]  # 14,000 is too close to the last
    assert [e.step for e in thin_trajectory(entries, 20000)] == [0, 15000]
    assert thin_trajectory(entries, None) == entries and thin_trajectory(entries, 1) == entries
    steps = [0, 10, 11, 30, 31]
    assert [e.step for e in thin_trajectory([TrajectoryFile(None, s) for s in steps], 10)] == [0, 10, 31]


def _run_thinned(run_folder, tmp_path, capsys, *flags):
    """Run `trajectory` on the fixture's folder with `flags`: (its JSON document, its table)."""
    folder, data = run_folder
    out = tmp_path / "t.json"
    code = main(["trajectory", str(folder), "--data", str(data), *FAST, *flags, "--json", str(out)])
    table = capsys.readouterr().out
    assert code in (0, 3)
    return json.loads(out.read_text()), table


def test_min_step_gap_anneals_through_the_kept_checkpoints(run_folder, tmp_path, capsys):
    doc, table = _run_thinned(run_folder, tmp_path, capsys, "--min-step-gap", "500")
    folder, data = run_folder
    assert [c["step"] for c in doc["checkpoints"]] == [20, 1000]  # 300 is within 500 steps of 20
    assert doc["settings"]["checkpoints"] == ["rbm_step20.pt", "rbm_step1000.pt"]
    assert doc["settings"]["threads"] == 1  # FAST's --threads 1, as run (it read null before)
    assert doc["settings"]["min_step_gap"] == 500 and doc["settings"]["checkpoints_saved"] == 3
    assert "2 checkpoints of a 8-6 RBM (2 of the 3 saved, --min-step-gap 500)" in table
    with pytest.raises(SystemExit) as refused:
        main(["trajectory", str(folder), "--data", str(data), *FAST, "--min-step-gap", "0"])
    assert refused.value.code == 2 and "--min-step-gap must be an integer of at least 1" in capsys.readouterr().err


def test_from_step_leaves_out_the_earlier_checkpoints(run_folder, tmp_path, capsys, monkeypatch):
    """--from-step: the path reaches the first checkpoint at or after the step from the independent start; the
    table and the JSON say which were left out; a step after the last checkpoint is refused by its flag."""
    doc, table = _run_thinned(run_folder, tmp_path, capsys, "--from-step", "100")
    folder, data = run_folder
    assert [c["step"] for c in doc["checkpoints"]] == [300, 1000]
    assert doc["settings"]["from_step"] == 100 and doc["settings"]["checkpoints_saved"] == 3
    assert "2 checkpoints of a 8-6 RBM (2 of the 3 saved, --from-step 100)" in table
    if importlib.util.find_spec("matplotlib") is not None:  # the plot's title says which checkpoints it shows
        import raise_eval.render.plots as plots

        titles = []
        monkeypatch.setattr(plots, "save_figure", lambda fig, path, dpi: titles.append(fig.axes[0].get_title()))
        _run_thinned(run_folder, tmp_path, capsys, "--from-step", "100", "--min-step-gap", "5")
        assert titles and titles[0].startswith("2 checkpoints (2 of the 3 saved, from_step 100, min_step_gap 5), K = 5")
    main(["trajectory", str(folder), "--data", str(data), *FAST, "--from-step", "1000", "--min-step-gap", "5"])
    assert "1 checkpoint of a 8-6 RBM (1 of the 3 saved, --from-step 1000, --min-step-gap 5)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        main(["trajectory", str(folder), "--data", str(data), *FAST, "--from-step", "1001"])
    err = capsys.readouterr().err
    assert refused.value.code == 2
    assert "--from-step 1001 is after the last checkpoint (step 1000, rbm_step1000.pt)" in err


def test_a_manifest_orders_the_files(run_folder):
    folder, _ = run_folder
    write_manifest(folder, [("rbm_step300.pt", 1), ("rbm_step20.pt", 2)])
    assert [(f.path.name, f.step) for f in list_trajectory(folder)] == [("rbm_step300.pt", 1), ("rbm_step20.pt", 2)]
    write_manifest(folder, [("rbm_step300.pt", 5), ("rbm_step20.pt", 2)])
    with pytest.raises(ValueError, match="steps must increase"):
        list_trajectory(folder)
    (folder / MANIFEST).write_text("{}")
    with pytest.raises(ValueError, match="not a manifest"):
        list_trajectory(folder)


def test_folders_that_are_not_one_trajectory_are_refused(run_folder, capsys):
    folder, data = run_folder
    save_checkpoint(folder / "rbm_step5000.pt", RBM(torch.zeros(8, 5), torch.zeros(8), torch.zeros(5)))
    with pytest.raises(SystemExit):
        main(["trajectory", str(folder), "--data", str(data), *FAST])
    assert "rbm_step5000.pt has layers 8-5 but rbm_step20.pt has 8-6" in capsys.readouterr().err
    (folder / "rbm_step5000.pt").unlink()
    dbm = random_walk((8, 6, 3), checkpoints=1)[0]
    assert isinstance(dbm, DBM)
    save_checkpoint(folder / "dbm_step7000.pt", dbm)
    with pytest.raises(SystemExit):
        main(["trajectory", str(folder), "--data", str(data), *FAST])
    assert "dbm_step7000.pt is a DBM but rbm_step20.pt an RBM" in capsys.readouterr().err


def test_names_without_steps_are_refused(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    for name, model in zip(["first.pt", "second.pt"], random_walk((8, 6), checkpoints=2)):
        save_checkpoint(folder / name, model)
    with pytest.raises(SystemExit):
        main(["trajectory", str(folder), "--data", "x.npy", *FAST])
    err = capsys.readouterr().err
    assert "first.pt has no step number in its name" in err and MANIFEST in err
    with pytest.raises(SystemExit):
        main(["trajectory", str(tmp_path / "missing"), *FAST])
    assert "missing does not exist" in capsys.readouterr().err


def test_trajectory_is_listed_in_the_commands_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "trajectory" in capsys.readouterr().out


def test_an_estimated_log_f_names_this_commands_remedies(tmp_path, capsys):
    """A DBM trajectory without enumeration estimates log f(v) unchecked: the warning points to options this command
    has (--exact always, --max-exact-units) and to a certified evaluation, not to the evaluation's log f(v) check."""
    folder = tmp_path / "dbm"
    folder.mkdir()
    for step, model in zip([0, 10], random_walk((8, 5, 4), checkpoints=2, seed=3)):
        save_checkpoint(folder / f"dbm_step{step}.pt", model.to(dtype=torch.float32), metadata={"step": step})
    data = tmp_path / "test.npy"
    np.save(data, (np.random.default_rng(0).random((30, 8)) < 0.5).astype(np.float32))
    main(["trajectory", str(folder), "--data", str(data), *FAST, "--exact", "never", "--max-exact-units", "1"])
    out = capsys.readouterr().out
    assert "warning [log-f-unchecked]" in out and "Give --exact always (with --max-exact-units" in out
    assert "log_f_check" not in out and "--log-f-check" not in out


def test_a_missing_folder_is_named_as_the_usage_names_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        main(["trajectory", str(tmp_path / "nowhere")])
    assert refused.value.code == 2 and f"DIR {tmp_path / 'nowhere'} does not exist" in capsys.readouterr().err


def test_resampling_from_the_command_line(run_folder, tmp_path, capsys):
    """--resample-ess runs SMC in --replicates groups: the table says so, the JSON keeps the settings and each
    checkpoint's resamplings; chains that do not split into the replicates are refused, naming the flags."""
    folder, data = run_folder
    out = tmp_path / "smc.json"
    smc = ["--resample-ess", "0.5", "--replicates", "20", "--rejuvenation-sweeps", "2"]
    code = main(["trajectory", str(folder), "--data", str(data), *FAST, *smc, "--json", str(out)])
    table = capsys.readouterr().out
    assert code in (0, 3)
    assert "200 chains in 20 SMC replicates (resampled below ESS 0.5" in table
    doc = json.loads(out.read_text())
    assert doc["settings"]["resample_ess"] == 0.5 and doc["settings"]["rejuvenation_sweeps"] == 2
    assert all(isinstance(c["resamplings"], int) for c in doc["checkpoints"])
    with pytest.raises(SystemExit) as stop:
        main(["trajectory", str(folder), "--data", str(data), *FAST, "--resample-ess", "0.5", "--replicates", "7"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--ais-chains (200) must be a multiple of --replicates (7)" in err and "--resample-ess" in err


def test_adaptive_links_from_the_command_line(run_folder, tmp_path, capsys):
    """--links adaptive: the pilot's plan is said in a note (table and JSON), the anchors are listed by file name."""
    folder, data = run_folder
    out = tmp_path / "adaptive.json"
    flags = ["--links", "adaptive", "--resample-ess", "0.5", "--pilot-chains", "50", "--target-cess", "0.8",
             "--anchor-margin", "0"]  # fmt: skip
    code = main(["trajectory", str(folder), "--data", str(data), *FAST, *flags, "--json", str(out)])
    table = capsys.readouterr().out
    assert code in (0, 3)
    assert "note: adaptive links: the pilot (50 chains" in table and "--target-cess 0.8" in table
    # the header said "K = 100 sub-steps per link" (a setting the adaptive plan does not use) beside the plan's total
    assert "sub-steps per link" not in table.splitlines()[1] and "adaptive links (target CESS 0.8)" in table
    doc = json.loads(out.read_text())
    assert doc["settings"]["links"] == "adaptive" and doc["settings"]["target_cess"] == 0.8
    assert set(doc["settings"]["anchors"]) <= {"rbm_step300.pt", "rbm_step1000.pt"}
    assert doc["settings"]["num_steps"] >= 3 and all(isinstance(c["resamplings"], int) for c in doc["checkpoints"])


def test_a_folder_of_potts_rbm_checkpoints_follows_its_trajectory(tmp_path, capsys):
    """Typed layers along a trajectory (issue 44: a folder of Potts RBM checkpoints, as rbms saves them, was refused
    as 'a MixedBoltzmannMachine'): .npz checkpoints of a categorical-visible RBM, the data as category codes, the
    start fitted to the training data's category frequencies; log Z against exact at every checkpoint."""
    from raise_eval import exact
    from tests.trajectories import write_potts_run

    folder, walk, _, _ = write_potts_run(tmp_path)
    out = tmp_path / "potts.json"
    options = [arg for arg in FAST if arg not in ("--init", "uniform")]
    code = main(["trajectory", str(folder), "--data", str(tmp_path / "test.npy"), "--train-data",
                 str(tmp_path / "train.npy"), *options, "--ais-chains", "2000", "--json", str(out)])  # fmt: skip
    table = capsys.readouterr().out
    assert code in (0, 3)
    assert "3 checkpoints of a 6-3 RBM of categorical, bernoulli units" in table
    doc = json.loads(out.read_text())
    assert [c["step"] for c in doc["checkpoints"]] == [1, 10, 100] and doc["settings"]["init"] == "base-rates"
    for c, model in zip(doc["checkpoints"], walk):
        truth = exact.log_partition(model)
        assert c["log_z_exact"] == pytest.approx(truth, abs=1e-4)
        assert abs(c["log_z"] - truth) < 4 * c["log_z_stderr"] + 1e-3, (c["log_z"], truth, c["log_z_stderr"])
