"""Generative models evaluated by raise-eval. Models expose energies, conditionals and samplers; they never
import the estimators in `raise_eval`."""

from models.boltzmann import LayeredBoltzmannMachine
from models.directed import DiagonalGaussianPosterior, DirectedLatentModel
from models.linear_gaussian import GaussianPosterior, LinearGaussianModel
from models.rbm import RBM
from models.sbn import SigmoidBeliefNet
from models.vae import VAE, VAEConfig

__all__ = [
    "RBM",
    "VAE",
    "DiagonalGaussianPosterior",
    "DirectedLatentModel",
    "GaussianPosterior",
    "LayeredBoltzmannMachine",
    "LinearGaussianModel",
    "SigmoidBeliefNet",
    "VAEConfig",
]
