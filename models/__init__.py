"""Generative models evaluated by raise-eval. Models expose energies, conditionals and samplers; they never
import the estimators in `raise_eval`.

Folders by family: boltzmann/ (the layered energy, RBM, DBM, DBN), directed/ (p(z) p(x|z) models), io/
(checkpoints), training/ (how the project's checkpoints were made); sampling.py is shared by all.
"""

from raise_eval.models.boltzmann import DBM, DBN, RBM, LayeredBoltzmannMachine
from raise_eval.models.directed import (
    VAE,
    DecoderModel,
    DiagonalGaussianPosterior,
    DirectedLatentModel,
    GaussianPosterior,
    LinearGaussianModel,
    SigmoidBeliefNet,
    VAEConfig,
)

__all__ = [
    "DBM",
    "DBN",
    "RBM",
    "VAE",
    "DecoderModel",
    "DiagonalGaussianPosterior",
    "DirectedLatentModel",
    "GaussianPosterior",
    "LayeredBoltzmannMachine",
    "LinearGaussianModel",
    "SigmoidBeliefNet",
    "VAEConfig",
]
