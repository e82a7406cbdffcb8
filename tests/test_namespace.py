"""The distribution installs no top-level `models` package: a user's own `models/` beside their script wins."""

import subprocess
import sys


def test_a_script_beside_its_own_models_package(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("RBM = 'user RBM'\n")
    (tmp_path / "script.py").write_text(
        "from models import RBM\n"
        "import raise_eval\n"
        "from raise_eval import RBM as LibraryRBM, load_checkpoint\n"
        "assert RBM == 'user RBM', RBM\n"
        "assert LibraryRBM.__module__.startswith('raise_eval.models'), LibraryRBM.__module__\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_no_top_level_models_package_is_installed(tmp_path):
    code = "import importlib.util; print(importlib.util.find_spec('models'))"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert result.stdout.strip() == "None", result.stdout
