"""Directed latent-variable models: p(z) p(x | z) with tractable joint densities (linear-Gaussian, SBN, VAE, and
any PyTorch decoder wrapped by `DecoderModel`)."""

from raise_eval.models.directed.adapter import DecoderModel, Prior, StandardNormalPrior
from raise_eval.models.directed.base import DiagonalGaussianPosterior, DirectedLatentModel, PosteriorApproximation
from raise_eval.models.directed.likelihoods import (
    LIKELIHOODS,
    BernoulliLikelihood,
    DataSupportError,
    DiscretizedLogisticLikelihood,
    DiscretizedLogisticMixtureLikelihood,
    GaussianLikelihood,
    Likelihood,
    make_likelihood,
)
from raise_eval.models.directed.linear_gaussian import GaussianPosterior, LinearGaussianModel
from raise_eval.models.directed.sbn import SigmoidBeliefNet
from raise_eval.models.directed.vae import VAE, VAEConfig

__all__ = [
    "LIKELIHOODS",
    "VAE",
    "BernoulliLikelihood",
    "DataSupportError",
    "DecoderModel",
    "DiscretizedLogisticLikelihood",
    "DiscretizedLogisticMixtureLikelihood",
    "GaussianLikelihood",
    "Likelihood",
    "Prior",
    "StandardNormalPrior",
    "make_likelihood",
    "DiagonalGaussianPosterior",
    "DirectedLatentModel",
    "GaussianPosterior",
    "LinearGaussianModel",
    "PosteriorApproximation",
    "SigmoidBeliefNet",
    "VAEConfig",
]
