"""Directed latent-variable models: p(z) p(x | z) with tractable joint densities (linear-Gaussian, SBN, VAE)."""

from models.directed.base import DiagonalGaussianPosterior, DirectedLatentModel, PosteriorApproximation
from models.directed.linear_gaussian import GaussianPosterior, LinearGaussianModel
from models.directed.sbn import SigmoidBeliefNet
from models.directed.vae import VAE, VAEConfig

__all__ = [
    "VAE",
    "DiagonalGaussianPosterior",
    "DirectedLatentModel",
    "GaussianPosterior",
    "LinearGaussianModel",
    "PosteriorApproximation",
    "SigmoidBeliefNet",
    "VAEConfig",
]
