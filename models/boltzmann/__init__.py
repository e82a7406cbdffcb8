"""Boltzmann machines: chains of binary layers (the layered energy, RBMs, DBMs and DBNs) and chains of typed layers
(`MixedBoltzmannMachine` over the Gaussian, categorical, spin and Bernoulli layers of `units`)."""

from raise_eval.models.boltzmann.dbm import DBM
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine
from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine, rbm_arrays, rbm_from_arrays
from raise_eval.models.boltzmann.rbm import RBM
from raise_eval.models.boltzmann.units import (
    BernoulliLayer,
    CategoricalLayer,
    GaussianLayer,
    Layer,
    SpinLayer,
    make_layer,
)

__all__ = [
    "DBM",
    "DBN",
    "RBM",
    "BernoulliLayer",
    "CategoricalLayer",
    "GaussianLayer",
    "Layer",
    "LayeredBoltzmannMachine",
    "MixedBoltzmannMachine",
    "SpinLayer",
    "make_layer",
    "rbm_arrays",
    "rbm_from_arrays",
]
