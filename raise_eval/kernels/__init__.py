"""Transition kernels: functions (state, beta, generator) -> state that leave p_beta invariant (reversibly). May import
the models' types and `stats`; never the estimators or anything above them."""

from raise_eval.kernels.binary_gibbs import BinaryGibbsKernel
from raise_eval.kernels.block_gibbs import block_gibbs_step
from raise_eval.kernels.energy_hmc import EnergyHMCKernel, MALAKernel, tune_step_sizes
from raise_eval.kernels.energy_sites import GibbsWithGradientsKernel, MetropolisScanKernel
from raise_eval.kernels.hmc import HMCKernel, StepSizeSchedule, tune_hmc
from raise_eval.kernels.mixed_gibbs import mixed_gibbs_step
from raise_eval.kernels.site_gibbs import SiteGibbsKernel, site_scan

__all__ = [
    "BinaryGibbsKernel",
    "EnergyHMCKernel",
    "GibbsWithGradientsKernel",
    "MALAKernel",
    "MetropolisScanKernel",
    "HMCKernel",
    "SiteGibbsKernel",
    "StepSizeSchedule",
    "block_gibbs_step",
    "mixed_gibbs_step",
    "site_scan",
    "tune_hmc",
    "tune_step_sizes",
]
