"""raise-eval: log-likelihoods of deep generative models that can be trusted.

AIS gives a stochastic lower bound on log Z (an optimistic log-likelihood for MRFs); RAISE a stochastic lower
bound on the log-likelihood of the annealing model (a conservative one); together they sandwich the truth.

The package (docs/architecture.md has the map): the algorithm core (annealing, schedules, adaptive, stats, exact,
diagnostics, settings; estimators/, kernels/, paths/), a package per protocol (evaluation/, certification/,
bidirectional/ for BDMC), run-time concerns (runtime/), input and output (io/), integrations (hooks, Lightning),
renderers (render/) and the command line (cli/). `raise_eval.models` is the repository's models/ folder.
"""

from raise_eval import _compat  # noqa: E402,F401  (the pre-0.2 module paths, for users' scripts)
from raise_eval._version import __version__ as __version__
from raise_eval.annealing import anneal
from raise_eval.bidirectional import BDMCReport, BDMCSettings, evaluate_bdmc
from raise_eval.certification import Certificate, CertifySettings, certify
from raise_eval.estimators import (
    AIDEResult,
    AISInference,
    AISResult,
    BDMCResult,
    EncoderInference,
    RAISEResult,
    ReverseAISResult,
    ThermodynamicResult,
    aide,
    ais,
    bdmc,
    elbo,
    iwae,
    raise_log_likelihood,
    reverse_ais,
    thermodynamic_integration,
)
from raise_eval.estimators.control_variates import ControlVariateEstimate, control_variate_mean
from raise_eval.estimators.unnormalized import LogUnnormalizedEstimate, log_unnormalized_estimate
from raise_eval.evaluation import (
    CostEstimate,
    EvaluateSettings,
    EvaluationPlan,
    EvaluationReport,
    estimate_cost,
    evaluate,
    plan_evaluation,
    recognition_means,
    run_evaluation,
)
from raise_eval.integrations.hooks import LikelihoodMonitor, MonitorSettings, SandwichRecord
from raise_eval.io.datasets import load_dataset
from raise_eval.io.results import dump_json
from raise_eval.io.writing import write_file as _write_file
from raise_eval.models import (
    DBM,
    DBN,
    RBM,
    VAE,
    BernoulliLayer,
    CategoricalLayer,
    DecoderModel,
    EnergyModel,
    FullyVisibleModel,
    GaussianLayer,
    GaussianPosterior,
    LayeredBoltzmannMachine,
    LinearGaussianModel,
    MixedBoltzmannMachine,
    SigmoidBeliefNet,
    SpinLayer,
    VAEConfig,
    rbm_from_arrays,
    read_adabmdca_parameters,
)
from raise_eval.models.boltzmann import products as _products
from raise_eval.models.io import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint, save_npz
from raise_eval.models.io import checkpoints as _checkpoints
from raise_eval.paths import (
    BoltzmannPath,
    DirectedPath,
    MixedPath,
    data_base_rates,
    make_path,
    mixed_data_base,
    mixed_uniform_base,
    uniform_base,
    visible_statistics,
)
from raise_eval.runtime.product_routes import choose_route as _choose_route
from raise_eval.schedules import linear_schedule, make_schedule, salakhutdinov_schedule, sigmoid_schedule
from raise_eval.settings import SettingsError

# models/ may not import raise_eval.io: its checkpoints are written whole (or not at all) by the writer given here.
_checkpoints.use_file_writer(_write_file)
# ... and its products take the routes raise-eval's policy chooses (timed per shape; RAISE_EVAL_PRODUCT_ROUTE).
_products.install_route_chooser(_choose_route)


def __getattr__(name: str):
    # Lightning is optional: its callback is imported when asked for.
    if name == "SandwichCallback":
        from raise_eval.integrations.lightning import SandwichCallback

        return SandwichCallback
    raise AttributeError(f"module 'raise_eval' has no attribute {name!r}")


__all__ = [
    "DBM",
    "DBN",
    "RBM",
    "VAE",
    "BernoulliLayer",
    "CategoricalLayer",
    "GaussianLayer",
    "MixedBoltzmannMachine",
    "MixedPath",
    "SpinLayer",
    "make_path",
    "mixed_data_base",
    "mixed_uniform_base",
    "rbm_from_arrays",
    "read_adabmdca_parameters",
    "visible_statistics",
    "BDMCReport",
    "BDMCSettings",
    "Certificate",
    "CertifySettings",
    "Checkpoint",
    "DecoderModel",
    "EnergyModel",
    "FullyVisibleModel",
    "CheckpointError",
    "ControlVariateEstimate",
    "CostEstimate",
    "EvaluateSettings",
    "EvaluationPlan",
    "EvaluationReport",
    "GaussianPosterior",
    "LayeredBoltzmannMachine",
    "LikelihoodMonitor",
    "LinearGaussianModel",
    "LogUnnormalizedEstimate",
    "MonitorSettings",
    "SandwichCallback",
    "SandwichRecord",
    "SettingsError",
    "SigmoidBeliefNet",
    "VAEConfig",
    "control_variate_mean",
    "dump_json",
    "estimate_cost",
    "evaluate",
    "evaluate_bdmc",
    "load_dataset",
    "plan_evaluation",
    "recognition_means",
    "run_evaluation",
    "certify",
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
    "ThermodynamicResult",
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
    "thermodynamic_integration",
    "uniform_base",
]
