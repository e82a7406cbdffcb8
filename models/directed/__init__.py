"""Directed latent-variable models: p(z) p(x | z) with tractable joint densities (linear-Gaussian, SBN, VAE)."""

from raise_eval.models.directed.base import DiagonalGaussianPosterior, DirectedLatentModel, PosteriorApproximation
from raise_eval.models.directed.linear_gaussian import GaussianPosterior, LinearGaussianModel
from raise_eval.models.directed.sbn import SigmoidBeliefNet
from raise_eval.models.directed.vae import VAE, VAEConfig

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
