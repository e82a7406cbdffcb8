"""Single-site updates in a palindromic scan for fully visible pairwise models (`FullyVisibleModel`): the kernel of
`raise_eval.paths.fully_visible.FullyVisiblePath`.

At inverse temperature beta the path's density is f_beta(v) = exp(sum_i g[i, v_i] + beta sum_{i<j} J[i, v_i, j, v_j])
with g = (1 - beta) c + beta h (c the independent-site base's fields). One step visits the sites 0, 1, ..., L-1,
then L-1, ..., 0, each update leaving every other site alone:

- 'gibbs': draw v_i from p_beta(v_i | v_rest), proportional to exp(g[i, a] + beta u[i, a]), with
  u[i, a] = sum_j J[i, a, j, v_j] the coupling input (cached for every site and state, and updated after each
  site's draw by J[:, :, i, new] - J[:, :, i, old], on the coupled sites only where the couplings are sparse);
- 'metropolis': propose one of the q - 1 other states uniformly, accept with min(1, f_beta(v') / f_beta(v)).

Each single-site update is reversible with respect to p_beta, and a palindromic product of reversible updates is
reversible: T = T_0 ... T_{L-1} T_{L-1} ... T_0 satisfies detailed balance, so the reversed annealing schedule
(RAISE) runs the exact reversal of the forward chain. Chains are the leading dimensions of the state (int64 site
codes shaped (*B, L)); every draw comes from the given generator.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from raise_eval.contracts import KernelInfo

METHODS = ("gibbs", "metropolis")


def palindromic_order(size: int) -> list[int]:
    """The sites of one step: 0..L-1, then L-1..0."""
    return [*range(size), *reversed(range(size))]


def site_scan(
    codes: Tensor,
    fields: Tensor,
    couplings: Tensor,
    coupling_scale: float,
    generator: torch.Generator,
    method: str = "gibbs",
    neighbour_tables: Optional[list] = None,
) -> tuple[Tensor, Optional[Tensor]]:
    """One palindromic scan of single-site updates of the density exp(sum_i fields[i, v_i] + coupling_scale *
    sum_{i<j} couplings[i, v_i, j, v_j]).

    Args:
        codes: int64 site codes shaped (*B, L) (not modified).
        fields: (L, q), the fields at this temperature.
        couplings: (L, q, L, q), symmetric (J[i, a, j, b] = J[j, b, i, a]) with J[i, :, i, :] = 0.
        coupling_scale: the factor of the couplings (beta on the geometric path).
        method: 'gibbs' or 'metropolis'.
        neighbour_tables: per site i, (the sites j coupled to i (m,), couplings[i][:, those sites, :] (q, m, q)) as
            `neighbour_tables` builds them, or None (every site updated after each draw): with sparse couplings (a
            lattice) a draw then touches only the coupled sites' inputs.

    Returns:
        (new codes (*B, L), for 'metropolis' the mean acceptance probability of the scan's 2L proposals per chain
        shaped (*B,), else None).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    size, q = fields.shape
    codes = codes.clone()
    batch = codes.shape[:-1]
    one_hot = torch.nn.functional.one_hot(codes, q).to(fields.dtype).reshape(*batch, size * q)
    coupling_input = (one_hot @ couplings.reshape(size * q, size * q)).reshape(*batch, size, q)
    acceptance = None if method == "gibbs" else torch.zeros(batch, dtype=fields.dtype, device=fields.device)
    order = palindromic_order(size)
    for i in order:
        logits = fields[i] + coupling_scale * coupling_input[..., i, :]  # (*B, q)
        old = codes[..., i]
        if method == "gibbs":
            new = _sample_categorical(logits, generator)
        else:
            u = torch.rand((2, *batch), generator=generator, device=fields.device, dtype=fields.dtype)
            shift = 1 + (u[0] * (q - 1)).long().clamp_(max=q - 2)  # uniform over the q - 1 other states
            proposal = (old + shift) % q
            log_ratio = logits.gather(-1, proposal.unsqueeze(-1)) - logits.gather(-1, old.unsqueeze(-1))
            accept_prob = torch.exp(log_ratio.squeeze(-1).clamp(max=0.0))
            acceptance += accept_prob
            new = torch.where(u[1] < accept_prob, proposal, old)
        # the coupling input of every site from site i: J[:, :, i, b] = J[i, b, :, :] (symmetry)
        if neighbour_tables is None:
            coupling_input += couplings[i][new] - couplings[i][old]
        else:
            sites, table = neighbour_tables[i]
            coupling_input.index_add_(-2, sites, table[new] - table[old])
        codes[..., i] = new
    if acceptance is not None:
        acceptance /= len(order)
    return codes, acceptance


def neighbour_tables(couplings: Tensor, max_fraction: float = 0.25) -> Optional[list]:
    """For `site_scan`: per site i, (the sites j with J[i, :, j, :] != 0 (int64), couplings[i][:, those, :]), or
    None when some site is coupled to more than `max_fraction` of the sites (dense couplings, as a DCA model's:
    updating every site's input is then cheaper than indexing). couplings: (L, q, L, q)."""
    coupled = couplings.ne(0).any(dim=3).any(dim=1)  # (L, L)
    size = coupled.shape[0]
    if int(coupled.sum(1).max()) > max_fraction * size:
        return None
    out = []
    for i in range(size):
        sites = coupled[i].nonzero().squeeze(1)
        out.append((sites, couplings[i][:, sites, :].contiguous()))
    return out


def _sample_categorical(logits: Tensor, generator: torch.Generator) -> Tensor:
    """One draw per row of softmax(logits) (*B, q) by inverse CDF, int64 shaped (*B,)."""
    probs = torch.softmax(logits, dim=-1)
    cdf = probs.cumsum(-1)
    u = torch.rand(logits.shape[:-1], generator=generator, device=logits.device, dtype=logits.dtype)
    return (cdf[..., :-1] < (u * cdf[..., -1]).unsqueeze(-1)).sum(-1)


class SiteGibbsKernel:
    """The palindromic single-site scan at the path's f_beta (`contracts.InfoKernel`): `step(state, beta,
    generator) -> (state, KernelInfo)`, the info's 'acceptance' the mean acceptance probability per chain (*B,)
    (1 for Gibbs draws, which always move to a draw of the conditional).

    Args:
        path: a fully visible path (`paths.fully_visible.FullyVisiblePath`): `site_parameters(beta)` gives the
            fields (L, q), the couplings (L, q, L, q) and their scale at beta.
        method: 'gibbs' (default) or 'metropolis'.
    """

    def __init__(self, path, method: str = "gibbs"):
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        self.path, self.method = path, method

    def step(self, state: Tensor, beta: float, generator: torch.Generator) -> tuple[Tensor, KernelInfo]:
        fields, couplings, scale = self.path.site_parameters(beta)
        tables = self.path.neighbour_tables()
        codes, acceptance = site_scan(state, fields, couplings, scale, generator, self.method, tables)
        if acceptance is None:
            acceptance = torch.ones(state.shape[:-1], dtype=fields.dtype, device=fields.device)
        return codes, KernelInfo(acceptance=acceptance)

    def __call__(self, state: Tensor, beta: float, generator: torch.Generator) -> Tensor:
        return self.step(state, beta, generator)[0]
