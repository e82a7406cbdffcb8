"""Generative models evaluated by raise-eval. Models expose energies, conditionals and samplers; they never
import the estimators in `raise_eval`.

Folders by family: boltzmann/ (the layered energy, RBM, DBM, DBN), directed/ (p(z) p(x|z) models),
fully_visible.py (pairwise models with no hidden units: DCA Potts, Ising), energy.py (the user's own
energy in PyTorch), io/
(checkpoints), training/ (how the project's checkpoints were made); sampling.py is shared by all.

The folder sits at the top of the repository (the layout the project was asked for) but is installed as
`raise_eval.models` (setup.py's package_dir), not as a top-level `models` package: a user's project very often has a
`models` package of its own, which an installed top-level one would shadow or be shadowed by. May import torch,
numpy and `raise_eval.models` itself only.
"""

from raise_eval.models.boltzmann import (
    DBM,
    DBN,
    RBM,
    BernoulliLayer,
    CategoricalLayer,
    GaussianLayer,
    LayeredBoltzmannMachine,
    MixedBoltzmannMachine,
    SpinLayer,
    rbm_from_arrays,
)
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
from raise_eval.models.energy import EnergyModel, GaussianBase, SiteBase, categorical, fit_base
from raise_eval.models.fully_visible import FullyVisibleModel
from raise_eval.models.io.fully_visible_files import read_adabmdca_parameters

__all__ = [
    "DBM",
    "DBN",
    "RBM",
    "VAE",
    "BernoulliLayer",
    "CategoricalLayer",
    "DecoderModel",
    "DiagonalGaussianPosterior",
    "DirectedLatentModel",
    "EnergyModel",
    "GaussianBase",
    "SiteBase",
    "categorical",
    "fit_base",
    "FullyVisibleModel",
    "read_adabmdca_parameters",
    "GaussianLayer",
    "GaussianPosterior",
    "LayeredBoltzmannMachine",
    "LinearGaussianModel",
    "MixedBoltzmannMachine",
    "SpinLayer",
    "SigmoidBeliefNet",
    "VAEConfig",
    "rbm_from_arrays",
]
