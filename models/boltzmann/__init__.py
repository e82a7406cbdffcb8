"""Boltzmann machines over chains of binary layers: the layered energy, RBMs, DBMs and DBNs."""

from models.boltzmann.layered import LayeredBoltzmannMachine
from models.boltzmann.rbm import RBM

__all__ = ["RBM", "LayeredBoltzmannMachine"]
