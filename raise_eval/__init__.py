"""raise-eval: log-likelihoods of deep generative models that can be trusted.

AIS gives a stochastic lower bound on log Z (an optimistic log-likelihood for MRFs); RAISE a stochastic lower
bound on the log-likelihood of the annealing model (a conservative one); together they sandwich the truth.
"""

from raise_eval._version import __version__ as __version__
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
from raise_eval.estimators.control_variates import ControlVariateEstimate, control_variate_mean
from raise_eval.estimators.unnormalized import LogUnnormalizedEstimate, log_unnormalized_estimate
from raise_eval.certify import Certificate, certify
from raise_eval.cost import CostEstimate, estimate_cost
from raise_eval.evaluate import EvaluationPlan, EvaluationReport, evaluate, plan_evaluation, run_evaluation
from raise_eval.hooks import LikelihoodMonitor, SandwichRecord
from raise_eval.models import (
    DBM,
    DBN,
    RBM,
    VAE,
    DecoderModel,
    GaussianPosterior,
    LayeredBoltzmannMachine,
    LinearGaussianModel,
    SigmoidBeliefNet,
    VAEConfig,
)
from raise_eval.models.io import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint, save_npz
from raise_eval.paths import BoltzmannPath, DirectedPath, data_base_rates, uniform_base
from raise_eval.schedules import linear_schedule, make_schedule, salakhutdinov_schedule, sigmoid_schedule

__all__ = [
    "DBM",
    "DBN",
    "RBM",
    "VAE",
    "Checkpoint",
    "DecoderModel",
    "CheckpointError",
    "ControlVariateEstimate",
    "CostEstimate",
    "EvaluationPlan",
    "EvaluationReport",
    "GaussianPosterior",
    "LayeredBoltzmannMachine",
    "LikelihoodMonitor",
    "LinearGaussianModel",
    "LogUnnormalizedEstimate",
    "SandwichRecord",
    "SigmoidBeliefNet",
    "VAEConfig",
    "control_variate_mean",
    "estimate_cost",
    "evaluate",
    "plan_evaluation",
    "run_evaluation",
    "certify",
    "Certificate",
    "load_checkpoint",
    "log_unnormalized_estimate",
    "save_checkpoint",
    "save_npz",
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
