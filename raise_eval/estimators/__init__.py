"""Estimators: model-agnostic loops over an annealing path (AIS, RAISE, BDMC, AIDE, log f(v), control variates),
and what they are compared with (ELBO, IWAE). May import `annealing`, `stats`, `kernels`, `paths` and the models' types;
never a protocol package, the CLI or the renderers."""

from raise_eval.estimators.aide import AIDEResult, AISInference, EncoderInference, aide
from raise_eval.estimators.ais import AISResult, ReverseAISResult, ais, reverse_ais
from raise_eval.estimators.bdmc import BDMCResult, bdmc
from raise_eval.estimators.importance import elbo, iwae
from raise_eval.estimators.raise_ import RAISEResult, raise_log_likelihood

__all__ = [
    "AIDEResult",
    "AISInference",
    "AISResult",
    "BDMCResult",
    "EncoderInference",
    "RAISEResult",
    "ReverseAISResult",
    "aide",
    "ais",
    "bdmc",
    "elbo",
    "iwae",
    "raise_log_likelihood",
    "reverse_ais",
]
