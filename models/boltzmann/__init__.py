"""Boltzmann machines over chains of binary layers: the layered energy, RBMs, DBMs and DBNs."""

from models.boltzmann.dbm import DBM
from models.boltzmann.dbn import DBN
from models.boltzmann.layered import LayeredBoltzmannMachine
from models.boltzmann.rbm import RBM

__all__ = ["DBM", "DBN", "RBM", "LayeredBoltzmannMachine"]
