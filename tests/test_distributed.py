"""Several processes through torch.distributed (gloo on the CPU): the same numbers as one process."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "checkpoints" / "rbm_digits_64-16.pt"
# 4 AIS shards and 3 RAISE shards (3 vectors x 4 chains each, the last one smaller): both ranks get work.
ARGS = [str(DEFAULT), "--steps", "30", "--ais-chains", "40", "--raise-examples", "8", "--raise-chains", "4"]
ARGS += ["--shard-size", "12", "--threads", "1", "--no-progress"]
RUN_DEPENDENT = ("processes", "max_memory", "threads")  # settings that do not enter the numbers


def _numbers(path: Path) -> dict:
    doc = json.loads(path.read_text())
    doc.pop("timing")
    doc.pop("cost_estimate")  # timed before the run, like "timing"
    for key in RUN_DEPENDENT:
        doc["settings"].pop(key)
    return doc


def test_two_gloo_processes_equal_one(tmp_path):
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    subprocess.run(
        [sys.executable, "-m", "raise_eval.cli", "evaluate", *ARGS, "--json", str(one)],
        cwd=ROOT,
        check=True,
        timeout=300,
    )
    # --standalone: a c10d rendezvous on localhost with a free port, so parallel test runs do not collide.
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    proc = subprocess.run(
        [*torchrun, "-m", "raise_eval.cli", "evaluate", *ARGS, "--json", str(two)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("raise-eval evaluate") == 1  # only rank 0 prints
    doc = json.loads(two.read_text())
    assert doc["settings"]["processes"] == 2 and doc["settings"]["shard_size"] == 12
    assert _numbers(two) == _numbers(one)


def test_two_processes_resume_from_their_own_files(tmp_path):
    """Under torchrun each rank keeps its shards in FILE.rank<r>-of-2; the same command run again reads them back
    (no shard is recomputed: the files are not rewritten) and gives the same numbers."""
    file = tmp_path / "run.pt"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    command = [*torchrun, "-m", "raise_eval.cli", "evaluate", *ARGS, "--resume-file", str(file)]
    docs = []
    for name in ("first", "again"):
        proc = subprocess.run(
            [*command, "--json", str(tmp_path / f"{name}.json")], cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        docs.append(_numbers(tmp_path / f"{name}.json"))
        if name == "first":
            ranks = sorted(p.name for p in tmp_path.glob("run.pt.rank*"))
            assert ranks == ["run.pt.rank0-of-2", "run.pt.rank1-of-2"]
            stamps = [p.stat().st_mtime_ns for p in sorted(tmp_path.glob("run.pt.rank*"))]
    assert [p.stat().st_mtime_ns for p in sorted(tmp_path.glob("run.pt.rank*"))] == stamps
    continued = docs[1]["notes"].pop()  # the second run says what it read back (rank 0's file: its 2 + 2 shards)
    assert "run.pt.rank0-of-2: 2 of 4 AIS shards read back; 2 of 3 RAISE shards read back" in continued
    assert docs[0] == docs[1]
