"""raise-eval: log-likelihoods of deep generative models that can be trusted.

AIS gives a stochastic lower bound on log Z (an optimistic log-likelihood for MRFs); RAISE a stochastic lower
bound on the log-likelihood of the annealing model (a conservative one); together they sandwich the truth.
"""

from raise_eval.annealing import anneal
from raise_eval.estimators import (
    AIDEResult,
    AISInference,
    AISResult,
    BDMCResult,
    EncoderInference,
    RAISEResult,
    ReverseAISResult,
    aide,
    ais,
    bdmc,
    elbo,
    iwae,
    raise_log_likelihood,
    reverse_ais,
)
from raise_eval.paths import BoltzmannPath, DirectedPath, data_base_rates, uniform_base
from raise_eval.schedules import linear_schedule, make_schedule, salakhutdinov_schedule, sigmoid_schedule

__version__ = "0.1.0"

__all__ = [
    "AIDEResult",
    "AISInference",
    "AISResult",
    "BDMCResult",
    "BoltzmannPath",
    "DirectedPath",
    "EncoderInference",
    "RAISEResult",
    "ReverseAISResult",
    "aide",
    "ais",
    "bdmc",
    "elbo",
    "iwae",
    "reverse_ais",
    "anneal",
    "data_base_rates",
    "linear_schedule",
    "make_schedule",
    "raise_log_likelihood",
    "salakhutdinov_schedule",
    "sigmoid_schedule",
    "uniform_base",
]
