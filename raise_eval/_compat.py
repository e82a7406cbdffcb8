"""The module paths of raise-eval 0.1 (`raise_eval.evaluate`, `raise_eval.datasets`, `raise_eval.hooks`, ...), kept
importable for users' scripts: each old name is the module that now holds its contents, or for a module that was
split, a module of the old names. New code imports from the packages (docs/architecture.md); these go in 0.3."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types

# old module -> the new module(s) whose public names it offers (the first is the module itself when only one)
MOVED = {
    "raise_eval.datasets": ("raise_eval.io.datasets",),
    "raise_eval.results": ("raise_eval.io.results",),
    "raise_eval.outputs": ("raise_eval.io.outputs",),
    "raise_eval.user_model": ("raise_eval.io.user_model",),
    "raise_eval.sharding": ("raise_eval.runtime.sharding",),
    "raise_eval.exact_mixed": ("raise_eval.exact.typed",),  # 0.3: one exact package
    "raise_eval.resume": ("raise_eval.runtime.resume",),
    "raise_eval.threads": ("raise_eval.runtime.threads",),
    "raise_eval.distributed": ("raise_eval.runtime.distributed",),
    "raise_eval.native": ("raise_eval.models.native",),  # 0.3: the C kernels belong to the model layer
    "raise_eval.evaluation.stage_registry": ("raise_eval.evaluation.stages",),  # 0.3: a stage is one object
    "raise_eval.hooks": ("raise_eval.integrations.hooks",),
    "raise_eval.log_f_check": ("raise_eval.evaluation.log_f_check",),
    "raise_eval.bdmc_report": ("raise_eval.bidirectional.run", "raise_eval.bidirectional.report",
                               "raise_eval.bidirectional.settings"),
    "raise_eval.certify": ("raise_eval.certification.run", "raise_eval.certification.report",
                           "raise_eval.certification.verdict", "raise_eval.certification.settings",
                           "raise_eval.settings"),
    "raise_eval.cost": ("raise_eval.evaluation.memory", "raise_eval.evaluation.timing"),
    "raise_eval.evaluate": ("raise_eval.evaluation.run", "raise_eval.evaluation.plan", "raise_eval.evaluation.report",
                            "raise_eval.evaluation.stages", "raise_eval.evaluation.settings"),
}  # fmt: skip
LAZY = {"raise_eval.lightning": "raise_eval.integrations.lightning"}  # needs the optional Lightning


def _combined(name: str, sources: tuple[str, ...]) -> types.ModuleType:
    module = types.ModuleType(name, f"raise-eval 0.1's {name}: now {', '.join(sources)}")
    for source in reversed(sources):  # the first source wins a name they share
        new = importlib.import_module(source)
        module.__dict__.update({k: v for k, v in vars(new).items() if not k.startswith("__")})
    return module


for _old, _sources in MOVED.items():
    if _old not in sys.modules:
        sys.modules[_old] = importlib.import_module(_sources[0]) if len(_sources) == 1 else _combined(_old, _sources)


class _LazyAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an optional module (Lightning's callback) under its old name only when asked for."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in LAZY:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module(LAZY[spec.name])

    def exec_module(self, module) -> None:
        pass


if not any(isinstance(f, _LazyAlias) for f in sys.meta_path):
    sys.meta_path.append(_LazyAlias())
