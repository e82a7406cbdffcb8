"""Estimators: model-agnostic loops over an annealing schedule."""

from raise_eval.estimators.ais import AISResult, ais
from raise_eval.estimators.raise_ import RAISEResult, raise_log_likelihood

__all__ = ["AISResult", "RAISEResult", "ais", "raise_log_likelihood"]
