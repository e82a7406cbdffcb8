"""Boltzmann machines over chains of binary layers: the layered energy, RBMs, DBMs and DBNs."""

from raise_eval.models.boltzmann.dbm import DBM
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine
from raise_eval.models.boltzmann.rbm import RBM

__all__ = ["DBM", "DBN", "RBM", "LayeredBoltzmannMachine"]
