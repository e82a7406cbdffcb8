"""The README's set-up commands are the ones CI uses, and CI builds the documentation in strict mode. (The README's
Python examples and links are checked, with those of docs/, by tests/test_docs.py.)"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI = (ROOT / ".ci" / "run").read_text()


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```bash\n(.*?)\n```", README, flags=re.S)
    test_command = next(c for c in commands if "pytest" in c)
    assert test_command in CI
    assert CI.index("torch==2.13.0") < CI.index("pytest")


def test_readme_install_command_runs_the_embedded_default():
    commands = re.findall(r"```bash\n(.*?)\n```", README, flags=re.S)
    assert commands[0].endswith("python3 -m pip install -e . && raise-eval evaluate checkpoints/rbm_digits_64-16.pt")


def test_ci_builds_the_docs_in_strict_mode():
    assert '".[docs]"' in CI, "CI must install the docs extra (mkdocs)"
    build = next(line for line in CI.splitlines() if "mkdocs build" in line)
    assert "--strict" in build
    assert CI.index('".[docs]"') < CI.index("mkdocs build")
