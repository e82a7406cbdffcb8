"""Generative models evaluated by raise-eval. Models expose energies, conditionals and samplers; they never
import the estimators in `raise_eval`."""

from models.boltzmann import LayeredBoltzmannMachine
from models.rbm import RBM

__all__ = ["LayeredBoltzmannMachine", "RBM"]
