"""docs/architecture.md's layering, read from the source (scripts/import_cycles.py): no import cycles between the
modules of raise_eval/ and models/ (module-level or function-level imports alike), models/ imports neither the
estimators nor raise_eval.io, and the algorithm core imports nothing above it."""

from __future__ import annotations

import importlib

from tests.scripts.test_reproduce_raise_tables import load_script

script = load_script("import_cycles")

# Cycles still to be removed, each by the merge of its two modules (issue 41: one geometric path, one exact package).
# Expected to be fixed: delete an entry when its cycle is gone.
KNOWN_CYCLES: set = set()  # none: every cycle of 0.3 is broken
# Layering breaches still to be removed: none (issue 41 moved the C kernels into the model layer, models/native).
KNOWN_BREACHES: set = set()


def test_no_import_cycles_between_the_modules():
    graph = script.import_graph()
    unexpected = [c for c in script.cycles(graph) if frozenset(c) not in KNOWN_CYCLES]
    assert unexpected == [], script.describe(graph)


def test_models_and_the_core_keep_to_their_layers():
    graph = script.import_graph()
    unexpected = [b for b in script.layering_breaches(graph) if b not in KNOWN_BREACHES]
    assert unexpected == [], script.describe(graph)


def _tree(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_reader_finds_cycles_hidden_in_functions_and_relative_imports(tmp_path):
    _tree(
        tmp_path,
        {
            "raise_eval/__init__.py": "",
            "raise_eval/io/__init__.py": "",
            "raise_eval/io/a.py": "def f():\n    from raise_eval.io import b\n",  # a submodule named in `from`
            "raise_eval/io/b.py": "from . import c\n",  # relative
            "raise_eval/io/c.py": "import raise_eval.io.a as a\n",
            "raise_eval/kernels/__init__.py": "",
            "raise_eval/kernels/k.py": "from ..io.a import f\n",  # the core importing io
            "models/__init__.py": "",
            "models/m.py": "def g():\n    from raise_eval.estimators import ais\n",
            "raise_eval/estimators/__init__.py": "from raise_eval.models import m\n",
        },
    )
    graph = script.import_graph(tmp_path)
    assert graph["raise_eval.io.a"] == {"raise_eval.io.b"}
    assert graph["raise_eval.models.m"] == {"raise_eval.estimators"}
    assert script.cycles(graph) == [
        ["raise_eval.estimators", "raise_eval.models.m"],
        ["raise_eval.io.a", "raise_eval.io.b", "raise_eval.io.c"],
    ]
    assert script.layering_breaches(graph) == [
        ("models/ imports raise_eval.estimators", "raise_eval.models.m", "raise_eval.estimators"),
        ("the core imports raise_eval.io", "raise_eval.kernels.k", "raise_eval.io.a"),
    ]
    assert script.main(["--root", str(tmp_path)]) == 1


# Names moved to break cycles (issue 41), still importable from where users and the old module paths found them.
MOVED_NAMES = {
    "raise_eval.paths.directed": ["DirectedState", "select_state"],
    "raise_eval.paths": ["DirectedState"],
    "raise_eval.io.results": ["TOOL", "scalar"],
    "raise_eval.results": ["TOOL", "scalar"],
    "raise_eval.runtime.resume": ["FORMAT", "READABLE_FORMATS", "deferred_interrupts", "interrupt_requested"],
    "raise_eval.resume": ["FORMAT", "READABLE_FORMATS", "deferred_interrupts", "interrupt_requested"],
    "raise_eval.certification.verdict": ["FLAT_SLOPE", "TREND_MAX_FACTOR", "log_f_allowance"],
    "raise_eval.certify": ["FLAT_SLOPE", "TREND_MAX_FACTOR", "log_f_allowance"],
    "raise_eval.evaluation.memory": ["format_duration"],
    "raise_eval.cost": ["format_duration"],
}


def test_moved_names_import_from_their_old_places():
    for module, names in MOVED_NAMES.items():
        loaded = importlib.import_module(module)
        assert [n for n in names if not hasattr(loaded, n)] == [], module


def test_checkpoints_are_written_whole_through_raise_eval_io():
    """models/ may not import raise_eval.io: the writer of raise_eval.io.writing is given to it when raise_eval is
    imported (as it is before any of raise_eval.models)."""
    from raise_eval.models.io import checkpoints

    from raise_eval.io.writing import write_file

    assert checkpoints.file_writer() is write_file
