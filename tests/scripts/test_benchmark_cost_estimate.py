"""scripts/benchmark_cost_estimate.py at toy scale: it plans, estimates and runs each case and reports predicted and
measured seconds for the same stages (no claim about the ratio here: that is what the script is for)."""

from __future__ import annotations

from tests.scripts.test_reproduce_raise_tables import load_script


def test_toy_benchmark(tmp_path, capsys):
    script = load_script("benchmark_cost_estimate")
    results = script.main(["--cases", "digits", "adaptive", "--steps", "10", "--threads", "1"])
    assert [r["case"] for r in results] == ["digits", "adaptive"]
    stages = [[row["stage"] for row in r["stages"]] for r in results]
    assert stages == [["ais", "exact", "raise", "total"], ["pilot", "ais", "exact", "raise", "total"]]
    for row in (row for r in results for row in r["stages"]):
        assert row["predicted"] > 0 and row["measured"] > 0
    assert "ratio = measured / predicted" in capsys.readouterr().out
