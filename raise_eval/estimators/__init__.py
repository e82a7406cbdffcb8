"""Estimators: model-agnostic loops over an annealing path (AIS, RAISE, BDMC, AIDE, log f(v), control variates, one
pass read at rungs, the same with resampling (SMC), and the Bennett acceptance ratio between them, thermodynamic
integration as users' tools report it),
and what they are compared with (ELBO, IWAE). May import `annealing`, `stats`, `kernels`, `paths` and the models' types;
never a protocol package, the CLI or the renderers."""

from raise_eval.estimators.aide import AIDEResult, AISInference, EncoderInference, aide
from raise_eval.estimators.ais import AISResult, ReverseAISResult, ais, reverse_ais
from raise_eval.estimators.bar import BARResult, LinkHealth, bar_ladder, bennett
from raise_eval.estimators.bdmc import BDMCResult, bdmc
from raise_eval.estimators.importance import elbo, iwae
from raise_eval.estimators.ladder import LadderPass, ladder_pass
from raise_eval.estimators.raise_ import RAISEResult, raise_log_likelihood
from raise_eval.estimators.smc import SMCLadderPass, smc_ladder_pass
from raise_eval.estimators.thermodynamic import ThermodynamicResult, thermodynamic_integration

__all__ = [
    "AIDEResult",
    "AISInference",
    "AISResult",
    "BARResult",
    "BDMCResult",
    "EncoderInference",
    "LadderPass",
    "LinkHealth",
    "RAISEResult",
    "SMCLadderPass",
    "ReverseAISResult",
    "ThermodynamicResult",
    "aide",
    "ais",
    "bar_ladder",
    "bdmc",
    "bennett",
    "elbo",
    "iwae",
    "ladder_pass",
    "raise_log_likelihood",
    "reverse_ais",
    "smc_ladder_pass",
    "thermodynamic_integration",
]
