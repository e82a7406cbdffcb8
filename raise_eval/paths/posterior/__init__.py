"""Annealing paths from a factorial proposal q(h | v) to the posterior of a DBM or DBN with v clamped.

Run by the generic `raise_eval.annealing.anneal`, they estimate f(v) = sum_h f(v, h) per test vector without bias:

    f_beta(h) = q(h | v)^(1 - beta) f(v, h)^beta,   Z_0(v) = sum_h f_0(h),   Z_1(v) = f(v),

so f-hat(v) = Z_0(v) mean_c exp(log w_c) over the chains c of a vector, where log w_c is the annealing log-weight
(AIS, Neal 2001). With one step (betas [0, 1]) this is importance sampling with q; more steps let the chains move
from q's mode to the posterior modes q misses, which importance sampling can only reach by luck.

States carry batch dimensions (N, C): N test vectors, C chains per vector. Per-vector constants (q's logits, the
visible layer's products) travel in the state, so one path serves any set of test vectors. Layers are in the
model's dtype; log-weights and log Z_0 in float64.

The package: `dbm` (DBMPosteriorPath), `dbn` (DBNPosteriorPath) with its unit-wise sweeps in `sweeps`, and `common`.
"""

from raise_eval.paths.posterior.common import softplus_increment
from raise_eval.paths.posterior.dbm import DBMPosteriorPath, DBMPosteriorState
from raise_eval.paths.posterior.dbn import DBNPosteriorPath, DBNPosteriorState
from raise_eval.paths.posterior.sweeps import _copy_rows_  # noqa: F401 (tests check it directly)


def posterior_path(model) -> DBMPosteriorPath | DBNPosteriorPath:
    """The posterior annealing path of a DBM or a DBN."""
    if model.family == "DBN":  # declared by the class (`models.contracts.Model`)
        return DBNPosteriorPath(model)
    return DBMPosteriorPath(model)


__all__ = [
    "DBMPosteriorPath",
    "DBMPosteriorState",
    "DBNPosteriorPath",
    "DBNPosteriorState",
    "posterior_path",
    "softplus_increment",
]
