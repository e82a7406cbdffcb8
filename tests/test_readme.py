"""The README stays true: its Python examples run, and its two set-up commands are the ones CI uses."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) >= 2
    for block in blocks:
        result = subprocess.run([sys.executable, "-c", block], cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 0, f"README example failed:\n{block}\n{result.stderr}"


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```bash\n(.*?)\n```", README, flags=re.S)
    test_command = next(c for c in commands if "pytest" in c)
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci
    assert ci.index("torch==2.13.0") < ci.index("pytest")
