"""Annealing paths: families f_beta from a tractable start (beta = 0) to the model of interest (beta = 1)."""

from raise_eval.paths.boltzmann import BoltzmannPath, data_base_rates, uniform_base
from raise_eval.paths.directed import DirectedPath, DirectedState

__all__ = ["BoltzmannPath", "DirectedPath", "DirectedState", "data_base_rates", "uniform_base"]
