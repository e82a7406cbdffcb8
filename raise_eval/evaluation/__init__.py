"""One evaluation of an RBM, DBM or DBN: AIS (optimistic), RAISE (conservative) and, when tractable, the exact
answer, in stages over a plan.

settings.py (`EvaluateSettings`: every setting declared once) -> plan.py (`plan_evaluation`: what this model and
data allow, decided once) -> stages/ (each stage one object: its run, its memory count, its timer; memory.py the
memory model's parts, timers.py the timing's, timing.py the cost model) -> run.py (`run_evaluation`, the API's
`evaluate`) -> report.py (`EvaluationReport`: data); log_f_check.py re-estimates log f(v) longer on a subset;
energy.py is a user's energy model's own evaluation (`evaluate_energy`, which `evaluate` runs for one). May import
the core (annealing, schedules, exact, estimators, paths, kernels), `runtime` and `io`; never `cli` or `render` (the
report's `format_table` calls `raise_eval.render` lazily).
"""

from raise_eval.evaluation.energy import EnergyReport, EnergySettings, evaluate_energy
from raise_eval.evaluation.memory import CostEstimate, StageCost
from raise_eval.evaluation.plan import EvaluationPlan, model_family, plan_evaluation, recognition_means
from raise_eval.evaluation.report import EvaluationFailed, EvaluationInterrupted, EvaluationReport, ExactValues
from raise_eval.evaluation.run import evaluate, run_evaluation
from raise_eval.evaluation.settings import EvaluateSettings
from raise_eval.evaluation.timing import estimate_cost

__all__ = [
    "CostEstimate",
    "EnergyReport",
    "EnergySettings",
    "EvaluateSettings",
    "EvaluationFailed",
    "EvaluationInterrupted",
    "EvaluationPlan",
    "EvaluationReport",
    "ExactValues",
    "StageCost",
    "estimate_cost",
    "evaluate_energy",
    "evaluate",
    "model_family",
    "plan_evaluation",
    "recognition_means",
    "run_evaluation",
]
