"""Annealing paths: families f_beta from a tractable start (beta = 0) to the model of interest (beta = 1): the
geometric (temperature) path, posteriors with v clamped, directed models, a training run's trajectory, fully visible
models and the user's energy models. May import `kernels` and the models; never the estimators or anything above
them."""

from raise_eval.paths.boltzmann import BoltzmannPath, data_base_rates, make_path, uniform_base
from raise_eval.paths.directed import DirectedPath, DirectedState
from raise_eval.paths.energy import EnergyPath
from raise_eval.paths.fully_visible import FullyVisiblePath, data_base_fields, site_frequencies, uniform_fields
from raise_eval.paths.mixed import MixedPath, mixed_data_base, mixed_uniform_base, visible_statistics
from raise_eval.paths.posterior import DBMPosteriorPath, DBNPosteriorPath, posterior_path
from raise_eval.paths.trajectory import TrajectoryPath, TrajectoryState, check_trajectory, trajectory_path

__all__ = [
    "BoltzmannPath",
    "DBMPosteriorPath",
    "DBNPosteriorPath",
    "DirectedPath",
    "DirectedState",
    "EnergyPath",
    "FullyVisiblePath",
    "MixedPath",
    "TrajectoryPath",
    "TrajectoryState",
    "check_trajectory",
    "data_base_fields",
    "data_base_rates",
    "make_path",
    "mixed_data_base",
    "mixed_uniform_base",
    "posterior_path",
    "site_frequencies",
    "trajectory_path",
    "uniform_base",
    "uniform_fields",
    "visible_statistics",
]
