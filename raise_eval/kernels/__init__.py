"""Transition kernels: functions (state, beta, generator) -> state that leave p_beta invariant."""

from raise_eval.kernels.block_gibbs import block_gibbs_step

__all__ = ["block_gibbs_step"]
