"""Annealing paths: families f_beta from a tractable start (beta = 0) to the model of interest (beta = 1). May import
`kernels` and the models; never the estimators or anything above them."""

from raise_eval.paths.boltzmann import BoltzmannPath, data_base_rates, uniform_base
from raise_eval.paths.directed import DirectedPath, DirectedState
from raise_eval.paths.posterior import DBMPosteriorPath, DBNPosteriorPath, posterior_path

__all__ = [
    "BoltzmannPath",
    "DBMPosteriorPath",
    "DBNPosteriorPath",
    "DirectedPath",
    "DirectedState",
    "data_base_rates",
    "posterior_path",
    "uniform_base",
]
