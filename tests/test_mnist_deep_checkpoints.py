"""End to end on the project's MNIST DBM and DBN checkpoints (slow: about a minute; needs the data root).

Small K: the point is that the whole path runs on real 784-unit models and reports what it should, not accuracy.
"""

import json

import pytest

from raise_eval.cli import main
from tests.conftest import PROJECT_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.data]


@pytest.mark.parametrize("name, start", [("dbm_mnist_500-1000.pt", "heating"), ("dbn_mnist_500-2000.pt", "heated")])
def test_mnist_checkpoint_evaluates(shared_data, tmp_path, name, start, capsys):
    out = tmp_path / "r.json"
    args = ["evaluate", str(PROJECT_ROOT / "checkpoints" / name), "--data", "binarized_mnist", "--split", "valid"]
    args += ["--data-root", str(shared_data), "--init", "uniform", "--steps", "50", "--ais-chains", "100"]
    args += ["--raise-examples", "20", "--raise-chains", "4", "--log-f-samples", "20", "--json", str(out)]
    assert main([*args, "--no-progress"]) == 0
    doc = json.loads(out.read_text())
    assert doc["complete"] and doc["log_likelihood"]["raise"]["start"] == start
    assert doc["log_likelihood"]["num_test"] == 10_000
    # K = 50 on these models is far too little: the report must say so
    assert "large-gap" in {w["code"] for w in doc["warnings"]}
    assert "warning [large-gap]" in capsys.readouterr().out
