"""Single-site updates in a palindromic scan for fully visible pairwise models (`FullyVisibleModel`): the kernel of
`raise_eval.paths.fully_visible.FullyVisiblePath`.

At inverse temperature beta the path's density is f_beta(v) = exp(sum_i g[i, v_i] + beta sum_{i<j} J[i, v_i, j, v_j])
with g = (1 - beta) c + beta h (c the independent-site base's fields). One step visits the sites 0, 1, ..., L-1,
then L-1, ..., 0, each update leaving every other site alone:

- 'gibbs': draw v_i from p_beta(v_i | v_rest), proportional to exp(g[i, a] + beta u[i, a]), with
  u[i, a] = sum_j J[i, a, j, v_j] the coupling input, summed from per-site tables of J by `torch.embedding_bag` over
  the other sites' states (`CouplingTables`: all sites for dense couplings, the coupled ones for sparse);
- 'metropolis': propose one of the q - 1 other states uniformly, accept with min(1, f_beta(v') / f_beta(v)).

Each single-site update is reversible with respect to p_beta, and a palindromic product of reversible updates is
reversible: T = T_0 ... T_{L-1} T_{L-1} ... T_0 satisfies detailed balance, so the reversed annealing schedule
(RAISE) runs the exact reversal of the forward chain. Chains are the leading dimensions of the state (int64 site
codes shaped (*B, L)); every draw comes from the given generator.

Sparse couplings (a lattice) are scanned by colour: the sites are coloured greedily so that no two coupled sites
share a colour (a square lattice with even sides: the two colours of a checkerboard), and one update draws every
site of a colour at once. Sites of one colour are conditionally independent given the others, so updating them
together is, in distribution, exactly updating them one after another: the scan is the palindromic single-site scan
in the order colour 0's sites, colour 1's, ..., then the colours reversed (`CouplingTables.scan_order`), reversible
as above, at a few tensor operations per colour instead of per site.
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


class CouplingTables:
    """The couplings J (L, q, L, q) as per-site lookup tables, so that a site's coupling input
    u[i, a] = sum_j J[i, a, j, v_j] is one `torch.embedding_bag` sum over the rows of the other sites' states: L q
    numbers read per chain and site, where a product with the one-hot state would multiply q times as many (mostly by
    zero). Built once per model (`FullyVisiblePath.coupling_tables`).

    Dense couplings (a DCA model's): one table per site, shaped (L q, q), row j q + b holding J[i, :, j, b] (the
    site's own block is zero). Sparse couplings (a lattice: every site coupled to at most `max_fraction` of the
    sites; `sparse` forces the choice): per site only its coupled sites' rows, (m q, q).
    """

    def __init__(self, couplings: Tensor, sparse: Optional[bool] = None, max_fraction: float = 0.25):
        size, q = couplings.shape[:2]
        self.size, self.num_states = size, q
        coupled = couplings.ne(0).any(dim=3).any(dim=1)  # (L, L)
        if sparse is None:
            sparse = int(coupled.sum(1).max()) <= max_fraction * size
        self.sparse = bool(sparse)
        self.sites: Optional[list[Tensor]] = None
        self.colours: Optional[list[Tensor]] = None
        if self.sparse:  # per site i: (its coupled sites (m,), their rows (m q, q)), row k q + b = J[i, :, sites[k], b]
            self.sites = [coupled[i].nonzero().squeeze(1) for i in range(size)]
            self.tables = [
                couplings[i][:, sites, :].permute(1, 2, 0).reshape(-1, q).contiguous()
                for i, sites in enumerate(self.sites)
            ]
            self._colour_tables(couplings)
        else:  # (L, L q, q): table i's row j q + b = J[i, :, j, b]
            self.tables = couplings.reshape(size, q, size * q).transpose(1, 2).contiguous()

    def _colour_tables(self, couplings: Tensor) -> None:
        """The colours (greedy, in site order: no two coupled sites share one) and, for updating a colour at once,
        every site's coupled sites padded to M, `neighbours` (L, M) (padding: site 0 through an all-zero table), and
        one table of rows ((i M + m) q + b) holding J[i, :, neighbours[i, m], b], shaped (L M q, q)."""
        size, q = self.size, self.num_states
        colour_of = [-1] * size
        for i in range(size):
            taken = {colour_of[j] for j in self.sites[i].tolist()}
            colour_of[i] = next(c for c in range(size) if c not in taken)
        device = couplings.device
        colour_of = torch.tensor(colour_of, device=device)
        self.colours = [(colour_of == c).nonzero().squeeze(1) for c in range(int(colour_of.max()) + 1)]
        width = max(1, max(int(s.numel()) for s in self.sites))
        self.neighbours = torch.zeros(size, width, dtype=torch.int64, device=device)
        padded = torch.zeros(size, width, q, q, dtype=couplings.dtype, device=device)  # [i, m, b, a]
        for i, sites in enumerate(self.sites):
            self.neighbours[i, : sites.numel()] = sites
            padded[i, : sites.numel()] = couplings[i][:, sites, :].permute(1, 2, 0)
        self.neighbour_table = padded.reshape(-1, q)
        # per colour, fixed for the run: its sites' neighbours (M, s) and their blocks' first rows (M, s, 1)
        self.colour_neighbours = [self.neighbours[c].t().contiguous() for c in self.colours]
        blocks = torch.arange(width, device=device).unsqueeze(1)
        self.colour_slots = [((c * width + blocks) * q).unsqueeze(1) for c in self.colours]

    def scan_order(self) -> list[int]:
        """The sites in the order one step updates them: 0..L-1 then L-1..0, or, by colour, colour 0's sites, ...,
        the last colour's, then the colours reversed (a colour's sites are updated at once)."""
        if self.colours is None:
            return palindromic_order(self.size)
        half = [s.tolist() for s in self.colours]
        return [i for c in [*half, *reversed(half)] for i in c]

    def colour_input(self, k: int, codes: Tensor) -> Tensor:
        """u[i, :] = sum_j J[i, :, j, v_j] for every chain and every site i of colour k (`colours[k]`, s sites),
        shaped (C, s, q); codes: the state (C, L)."""
        width, q = self.neighbours.shape[1], self.num_states
        neighbours, slot = self.colour_neighbours[k], self.colour_slots[k]  # (M, s), (M, 1, s)
        # rows laid out (M, C, s): the sum over the M neighbours adds whole contiguous blocks, which is several times
        # faster on the CPU than embedding_bag's or a last-but-one dimension's sum over 4 rows (float64 above all)
        rows = (codes[:, neighbours].transpose(0, 1) + slot).reshape(-1)
        picked = self.neighbour_table.index_select(0, rows).view(width, codes.shape[0], neighbours.shape[1], q)
        return picked.sum(0)

    def row_index(self, codes: Tensor) -> Tensor:
        """The table rows of every site's state, codes + site q, int64 shaped like `codes` (*B, L)."""
        return codes + torch.arange(self.size, device=codes.device) * self.num_states

    def coupling_input(self, i: int, rows: Tensor) -> Tensor:
        """u[i, :] = sum_j J[i, :, j, v_j] for every chain, shaped (C, q); rows: `row_index` of the state, (C, L)."""
        if not self.sparse:
            return torch.nn.functional.embedding_bag(rows, self.tables[i], mode="sum")
        sites = self.sites[i]
        if sites.numel() == 0:
            return rows.new_zeros((rows.shape[0], self.num_states), dtype=self.tables[i].dtype)
        local = rows[:, sites] - (sites - torch.arange(sites.numel(), device=rows.device)) * self.num_states
        return torch.nn.functional.embedding_bag(local, self.tables[i], mode="sum")


def site_scan(
    codes: Tensor,
    fields: Tensor,
    tables: CouplingTables,
    coupling_scale: float,
    generator: torch.Generator,
    method: str = "gibbs",
) -> tuple[Tensor, Optional[Tensor]]:
    """One palindromic scan of single-site updates of the density exp(sum_i fields[i, v_i] + coupling_scale *
    sum_{i<j} J[i, v_i, j, v_j]).

    Args:
        codes: int64 site codes shaped (*B, L) (not modified).
        fields: (L, q), the fields at this temperature.
        tables: the couplings J (symmetric, J[i, :, i, :] = 0) as `CouplingTables`.
        coupling_scale: the factor of the couplings (beta on the geometric path).
        method: 'gibbs' or 'metropolis'.

    Returns:
        (new codes (*B, L), for 'metropolis' the mean acceptance probability of the scan's 2L proposals per chain
        shaped (*B,), else None).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    size = fields.shape[0]
    batch = codes.shape[:-1]
    codes = codes.reshape(-1, size).clone()  # (C, L): the chains flattened
    acceptance = None if method == "gibbs" else torch.zeros(codes.shape[0], dtype=fields.dtype, device=fields.device)
    scan_(codes, fields, tables, coupling_scale, generator, method, acceptance)
    if acceptance is not None:
        acceptance = (acceptance / (2 * size)).reshape(batch)
    return codes.reshape(*batch, size), acceptance


def scan_(
    codes: Tensor, fields: Tensor, tables: CouplingTables, coupling_scale, generator: torch.Generator, method: str,
    acceptance: Optional[Tensor] = None,
) -> Tensor:  # fmt: skip
    """`site_scan` on the flattened chains' codes (C, L), updated in place (by colour where `tables` has colours),
    with no host synchronisation: the step program's scan (`kernels.site_program`) as well as the eager one's.
    coupling_scale: a float, or a 0-d tensor on the device (beta read from a schedule, which a CUDA graph can
    capture). acceptance: None, or (C,) to which each update's acceptance probability is added ('metropolis')."""
    if tables.colours is not None:
        order = [*range(len(tables.colours)), *reversed(range(len(tables.colours)))]
        for k in order:
            colour = tables.colours[k]
            logits = _scaled_add(fields[colour], tables.colour_input(k, codes), coupling_scale)  # (C, s, q)
            new = _update(logits, codes[:, colour], generator, method, acceptance)
            codes[:, colour] = new
        return codes
    q = fields.shape[1]
    rows = tables.row_index(codes)
    for i in palindromic_order(fields.shape[0]):
        logits = _scaled_add(fields[i], tables.coupling_input(i, rows), coupling_scale)  # (C, q)
        new = _update(logits, codes[:, i], generator, method, acceptance)
        codes[:, i] = new
        rows[:, i] = new + i * q
    return codes


def _scaled_add(fields: Tensor, inputs: Tensor, scale) -> Tensor:
    """fields + scale * inputs, scale a float or a 0-d tensor (the same bits on the CPU: one fused multiply-add)."""
    if isinstance(scale, Tensor):
        return torch.addcmul(fields, inputs, scale)
    return torch.add(fields, inputs, alpha=scale)


def _update(logits: Tensor, old: Tensor, generator: torch.Generator, method: str, acceptance: Optional[Tensor]):
    """The new states of the sites whose conditional logits are `logits` (*B, q) and states `old` (*B,): a Gibbs
    draw, or a Metropolis step proposing one of the q - 1 other states uniformly (its acceptance probability, summed
    over the sites, added to `acceptance` (C,) where given)."""
    if method == "gibbs":
        return _sample_categorical(logits, generator)
    q = logits.shape[-1]
    u = torch.rand((2, *old.shape), generator=generator, device=logits.device, dtype=logits.dtype)
    shift = 1 + (u[0] * (q - 1)).long().clamp_(max=q - 2)  # uniform over the q - 1 other states
    proposal = (old + shift) % q
    log_ratio = logits.gather(-1, proposal.unsqueeze(-1)) - logits.gather(-1, old.unsqueeze(-1))
    accept_prob = torch.exp(log_ratio.squeeze(-1).clamp(max=0.0))
    if acceptance is not None:
        acceptance += accept_prob if accept_prob.dim() == 1 else accept_prob.sum(1)
    return torch.where(u[1] < accept_prob, proposal, old)


def _sample_categorical(logits: Tensor, generator: torch.Generator) -> Tensor:
    """One draw per row of softmax(logits) (*B, q) by inverse CDF, int64 shaped (*B,)."""
    # unnormalized weights: the draw compares u times the total, and softmax along a short last dimension is slow
    cdf = (logits - logits.amax(-1, keepdim=True)).exp_().cumsum(-1)
    u = torch.rand(logits.shape[:-1], generator=generator, device=logits.device, dtype=logits.dtype)
    return (cdf[..., :-1] < (u * cdf[..., -1]).unsqueeze(-1)).sum(-1)


class SiteGibbsKernel:
    """The palindromic single-site scan at the path's f_beta (`contracts.InfoKernel`): `step(state, beta,
    generator) -> (state, KernelInfo)`, the info's 'acceptance' the mean acceptance probability per chain (*B,)
    (1 for Gibbs draws, which always move to a draw of the conditional).

    Args:
        path: a fully visible path (`paths.fully_visible.FullyVisiblePath`): `site_parameters(beta)` gives the
            fields (L, q), the couplings' `CouplingTables` and their scale at beta.
        method: 'gibbs' (default) or 'metropolis'.
    """

    def __init__(self, path, method: str = "gibbs"):
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        self.path, self.method = path, method

    def step(self, state: Tensor, beta: float, generator: torch.Generator) -> tuple[Tensor, KernelInfo]:
        fields, tables, scale = self.path.site_parameters(beta)
        codes, acceptance = site_scan(state, fields, tables, scale, generator, self.method)
        if acceptance is None:
            acceptance = torch.ones(state.shape[:-1], dtype=fields.dtype, device=fields.device)
        return codes, KernelInfo(acceptance=acceptance)

    def __call__(self, state: Tensor, beta: float, generator: torch.Generator) -> Tensor:
        return self.step(state, beta, generator)[0]
