"""Exact answers for small models, by enumeration: ground truth for every estimator test.

- `log_partition`: log Z, enumerating whichever parity group of layers (even or odd) has fewer units and
  summing the other out analytically; for an RBM, the smaller layer (up to about 25 units).
- `log_unnormalized_visible` / `log_likelihood`: log f(v) and log p(v). For a DBM, with v clamped, either the
  even hidden layers (x_2, x_4, ...) are enumerated and the odd ones summed out ('even' route), or the odd layers
  (x_1, x_3, ...) are enumerated and the even hidden ones summed out ('odd' route), whichever enumerates fewer
  units: a 784-20-500 DBM enumerates its 20 first-layer units. An RBM's log f(v) is closed-form.
- `annealing_model_marginal`: p_ann(v), the distribution of the visible state after the forward annealing chain
  x_0 ~ p_0, x_k ~ T_k(. | x_{k-1}) (k = 1..K) with the collapsed block-Gibbs kernel, computed by propagating
  p_0 through exact transition matrices built from the energy alone. RAISE is unbiased for this quantity.
- `exact_cost` / `log_f_units`: what the exact computations would enumerate and roughly how many multiply-adds
  they take, without doing them.

DBNs (`raise_eval.models.boltzmann.dbn.DBN`) are handled too: log Z is the top RBM's, log f(v) sums the directed layers
x_1 .. x_{L-1} by enumeration, pushing the top RBM's marginal down one directed layer at a time, and p_ann(v) is
the top RBM's annealing model pushed down through the directed layers (the unrolled annealing model that unrolled
RAISE is unbiased for).

Everything is computed in float64 from the models' own energies and logits, never from the samplers, so these
functions check the kernels rather than repeat them. Configurations are enumerated in chunks (and test vectors
in blocks when needed) sized so that the float64 temporaries of one chunk stay under `max_bytes`; the sums over
chunks are kept as a running log-sum-exp per vector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

import torch
from torch import Tensor

from raise_eval.exact.enumeration import (
    BYTES,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_UNITS,
    ExactCost,
    RunningLogSumExp,
    binary_configurations,
    check_units,
    chunks,
    configuration_index,
    grow_bar,
    plan_chunks,
    progress_bar,
    softplus_,
)
from raise_eval.models.boltzmann.dbn import DBN
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine

LOG_F_ROUTES = ("even", "odd", "closed-form", "dbn")


def _groups(model: LayeredBoltzmannMachine) -> tuple[list[int], list[int]]:
    even = list(range(0, model.num_layers, 2))
    odd = list(range(1, model.num_layers, 2))
    return even, odd


def _split(config: Tensor, layer_ids: Sequence[int], sizes: Sequence[int]) -> dict[int, Tensor]:
    out, start = {}, 0
    for l in layer_ids:
        out[l] = config[..., start : start + sizes[l]]
        start += sizes[l]
    return out


# ----------------------------------------------------------------------------------------------- routes and costs
def _log_z_group(model: LayeredBoltzmannMachine) -> tuple[str, list[int], int]:
    """('even' or 'odd', the layers log Z enumerates, their units): the parity group with fewer units (even on a
    tie, as before routes were named)."""
    sizes = model.layer_sizes
    even, odd = _groups(model)
    n_even, n_odd = sum(sizes[l] for l in even), sum(sizes[l] for l in odd)
    return ("odd", odd, n_odd) if n_odd < n_even else ("even", even, n_even)


def _dbn_log_f_units(dbn: DBN) -> int:
    """The most units a DBN's push-down enumerates at once: x_1 when there is one directed hidden layer, else the
    largest pair (x_l, x_{l+1}) of directed layers whose table log p(x_l | x_{l+1}) is summed."""
    sizes = dbn.layer_sizes
    top = len(dbn.weights) - 1  # x_top is the top RBM's visible layer
    if top == 1:
        return sizes[1]
    return max(sizes[l] + sizes[l + 1] for l in range(1, top))


def _log_f_route(model, route: Optional[str] = None) -> tuple[str, int]:
    """(route, units it enumerates) for log f(v); `route` forces 'odd' or 'even' on a DBM-like chain."""
    if model.family == "DBN":
        valid, chosen, units = ("dbn",), "dbn", _dbn_log_f_units(model)
    elif model.num_layers == 2:
        valid, chosen, units = ("closed-form",), "closed-form", 0
    else:
        sizes = model.layer_sizes
        odd, even = sum(sizes[1::2]), sum(sizes[2::2])
        # The odd route costs a multiply-add per x_1 unit per (vector, configuration), the even route a softplus
        # (about ten): the odd one is cheaper up to about 2^3 times the configurations (measured: 784-18-17 and
        # 784-16-14 DBMs, odd 5 to 9 times faster), so it is kept up to two units more, within the default limit.
        prefer_odd = odd <= even or (odd <= even + 2 and odd <= DEFAULT_MAX_UNITS)
        valid, chosen, units = ("odd", "even"), *(("odd", odd) if prefer_odd else ("even", even))
        if route in valid:
            chosen, units = route, odd if route == "odd" else even
    if route is not None and route not in valid:
        raise ValueError(f"route {route!r} does not apply to {model!r}; use None or one of {', '.join(valid)}")
    return chosen, units


def log_f_units(model) -> int:
    """Units the cheapest exact log f(v) route enumerates (2^units configurations; 0 for an RBM, whose log f(v)
    is closed-form)."""
    return _log_f_route(model)[1]


def _layered_log_z_cost(model: LayeredBoltzmannMachine) -> tuple[str, int, int, int]:
    group_name, group, units = _log_z_group(model)
    sizes = model.layer_sizes
    summed = [l for l in range(model.num_layers) if l not in group]
    configs = 2**units
    # each weight matrix joins an enumerated and a summed-out layer, so it enters each configuration once
    per_config = units + sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
    return group_name, units, configs * per_config, configs * (sum(sizes[l] for l in summed) + 1)


def _dbn_level_cost(sizes: Sequence[int], l: int, rows: int, top_inline: Optional[int]) -> tuple[int, int]:
    """(macs, exps) of summing x_{l+1} out of log p(x_l | x_{l+1}) + log w(x_{l+1}) for `rows` values of x_l."""
    configs = 2 ** sizes[l + 1]
    per_config = sizes[l + 1] * sizes[l] + sizes[l]  # generative logits
    exps = sizes[l]
    if top_inline is not None:  # log f_top(x_{l+1}) computed per chunk: the top RBM's hidden logits
        per_config += sizes[l + 1] * top_inline + sizes[l + 1]
        exps += top_inline
    macs = configs * per_config + rows * configs * sizes[l + 1] + rows * (sizes[l] * sizes[l + 1] + sizes[l])
    return macs, configs * exps + rows * configs


def exact_cost(model, num_vectors: int) -> ExactCost:
    """The units, routes and approximate work of exact log Z and of exact log f(v) for `num_vectors` vectors
    (RBM, DBM or DBN), without enumerating anything. See `ExactCost`."""
    n = int(num_vectors)
    if model.family == "DBN":
        group_name, z_units, z_macs, z_exps = _layered_log_z_cost(model.top)
    else:
        group_name, z_units, z_macs, z_exps = _layered_log_z_cost(model)
    route, f_units = _log_f_route(model)
    sizes = model.layer_sizes
    if route == "closed-form":
        f_macs, f_exps = n * (sizes[0] * sizes[1] + sizes[0]), n * sizes[1]
    elif route == "odd":
        configs = 2**f_units
        per_config = sum(sizes[1::2]) + sum(
            sizes[l] * (sizes[l - 1] + (sizes[l + 1] if l + 1 < len(sizes) else 0)) for l in range(2, len(sizes), 2)
        )
        f_macs = configs * per_config + n * configs * sizes[1] + n * (sizes[0] * sizes[1] + sizes[0])
        f_exps = configs * sum(sizes[2::2]) + n * configs
    elif route == "even":
        configs = 2**f_units
        per_config = (
            sum(sizes[2::2])
            + sizes[2] * sizes[1]
            + sum(
                sizes[l] * (sizes[l - 1] + (sizes[l + 1] if l + 1 < len(sizes) else 0)) for l in range(3, len(sizes), 2)
            )
        )
        f_macs = configs * per_config + n * configs * sizes[1] + n * (sizes[0] * sizes[1] + sizes[0])
        f_exps = configs * sum(sizes[3::2]) + n * configs * (sizes[1] + 1)
    else:  # dbn
        top = len(model.weights) - 1
        if top == 1:
            f_macs, f_exps = _dbn_level_cost(sizes, 0, n, top_inline=sizes[2])
        else:
            f_macs = 2 ** sizes[top] * (sizes[top] * sizes[top + 1] + sizes[top])
            f_exps = 2 ** sizes[top] * sizes[top + 1]
            for l in range(top - 1, -1, -1):
                macs, exps = _dbn_level_cost(sizes, l, n if l == 0 else 2 ** sizes[l], top_inline=None)
                f_macs, f_exps = f_macs + macs, f_exps + exps
    return ExactCost(n, z_units, group_name, z_macs, z_exps, route, f_units, f_macs, f_exps)


# ----------------------------------------------------------------------------------------------- log Z
def chunk_bytes(model, num_vectors: int, with_log_f: bool, max_bytes: int) -> int:
    """Peak bytes of one chunk of the enumeration `log_partition` (and, `with_log_f`, `log_unnormalized_visible` of
    `num_vectors` vectors) runs within `max_bytes`: the memory model's term for the exact stage."""
    cost = exact_cost(model, num_vectors)
    units = max(cost.log_z_units, cost.log_f_units)
    per_config = BYTES * (2 * units + 2 * max(model.layer_sizes) + 4)
    per_pair = BYTES * (model.layer_sizes[1] + 1) if with_log_f else 0
    return min(max_bytes, 2**units * (per_config + int(num_vectors) * per_pair))


def log_partition(
    model: LayeredBoltzmannMachine,
    *,
    max_units: int = DEFAULT_MAX_UNITS,
    chunk_size: Optional[int] = None,
    max_bytes: Optional[int] = None,
    progress: bool = False,
) -> float:
    """Exact log Z in float64, enumerating the parity group (even or odd layers) with fewer units (for a DBN, the
    top RBM's).

    Args:
        max_units: refuse (ValueError) to enumerate more than 2^max_units configurations.
        chunk_size: at most this many configurations per chunk (None: as many as `max_bytes` allows).
        max_bytes: bound on the float64 temporaries of one chunk (None: `DEFAULT_MAX_BYTES`).
        progress: a tqdm bar over the chunks.
    """
    if model.family == "DBN":
        return log_partition(
            model.top, max_units=max_units, chunk_size=chunk_size, max_bytes=max_bytes, progress=progress
        )
    max_bytes = DEFAULT_MAX_BYTES if max_bytes is None else int(max_bytes)
    m = model.to(dtype=torch.float64)
    sizes = m.layer_sizes
    _, group, units = _log_z_group(m)
    check_units(units, max_units, "log Z")
    widest = max(sizes[l] for l in range(m.num_layers) if l not in group)
    # the codes and bits of `binary_configurations`, a summed-out layer's logits and their softplus, the sums
    per_config = BYTES * (2 * units + 2 * widest + 4)
    c, _ = plan_chunks(2**units, 1, per_config, 0, 0, max_bytes, chunk_size)
    acc = RunningLogSumExp(1, m.device)
    with progress_bar(progress, "exact log Z") as bar:
        grow_bar(bar, len(chunks(2**units, c)))
        for start, stop in chunks(2**units, c):
            parts = _split(binary_configurations(units, start, stop, device=m.device), group, sizes)
            layers = [parts.get(l) for l in range(m.num_layers)]
            acc.add_(0, 1, m.log_unnormalized_marginal(layers).unsqueeze(0))
            del parts, layers  # free this chunk before the next one is built: one chunk alive at a time
            bar.update(1)
    return float(acc.result()[0])


# ----------------------------------------------------------------------------------------------- log f(v)
def log_unnormalized_visible(
    model: LayeredBoltzmannMachine,
    v: Tensor,
    *,
    max_units: int = DEFAULT_MAX_UNITS,
    chunk_size: Optional[int] = None,
    max_bytes: Optional[int] = None,
    progress: bool = False,
    route: Optional[str] = None,
) -> Tensor:
    """Exact log f(v) = log sum_{hidden} f(v, hidden) in float64, shaped (*batch,) for v shaped (*batch, n_visible).

    RBM: closed-form. DBM (any chain of three or more layers): with v clamped, the 'odd' route enumerates x_1,
    x_3, ... and sums the even hidden layers out; the 'even' route enumerates x_2, x_4, ... and sums the odd
    layers out; the one with fewer units is used unless `route` says which. DBN: f(v) = sum_{x_1..x_{L-1}}
    prod p(x_l | x_{l+1}) f_top(x_{L-1}), the directed layers summed one at a time from the top down.

    Args:
        max_units: refuse (ValueError) when the route would enumerate more than 2^max_units configurations.
        chunk_size: at most this many configurations per chunk (None: as many as `max_bytes` allows).
        max_bytes: bound on the float64 temporaries of one chunk, its table against the vectors included (None:
            `DEFAULT_MAX_BYTES`); per-vector state (v in float64, its products with the first weights, the running
            sums: a few times N x n_1 numbers) comes on top. A DBN with several directed hidden layers also keeps
            one log-weight per configuration of each directed layer (2^n_l numbers).
        progress: a tqdm bar over the chunks.
        route: None (the cheaper), 'odd' or 'even' for DBMs; 'closed-form' for RBMs and 'dbn' for DBNs are
            accepted too.
    """
    chosen, units = _log_f_route(model, route)
    max_bytes = DEFAULT_MAX_BYTES if max_bytes is None else int(max_bytes)
    check_units(units, max_units, "a DBN's log f(v)" if chosen == "dbn" else "log f(v)")
    m = model.to(dtype=torch.float64)
    v = v.to(dtype=torch.float64, device=m.device)
    batch, v_flat = v.shape[:-1], v.reshape(-1, v.shape[-1])
    if v_flat.shape[0] == 0:
        return torch.zeros(batch, dtype=torch.float64, device=m.device)
    if chosen == "dbn":
        out = _dbn_log_f(m, v_flat, None, max_bytes, chunk_size, progress)
    elif chosen == "closed-form":
        out = _closed_form_log_f(m, v_flat, max_bytes, progress)
    else:
        compute = _log_f_odd if chosen == "odd" else _log_f_even
        out = compute(m, v_flat, max_bytes, chunk_size, progress)
    return out.reshape(batch)


def _closed_form_log_f(m: LayeredBoltzmannMachine, v: Tensor, max_bytes: int, progress: bool) -> Tensor:
    """An RBM's log f(v) for v shaped (N, n_visible), shaped (N,), in blocks of vectors."""
    n = v.shape[0]
    block = max(1, max_bytes // (BYTES * (2 * m.layer_sizes[1] + 2)))  # hidden logits and their softplus
    out = torch.empty(n, dtype=torch.float64, device=m.device)
    with progress_bar(progress, "exact log f(v)") as bar:
        grow_bar(bar, len(chunks(n, block)))
        for a, b in chunks(n, block):
            out[a:b] = m.log_unnormalized_marginal([v[a:b], None])
            bar.update(1)
    return out


def _log_f_odd(
    m: LayeredBoltzmannMachine, v: Tensor, max_bytes: int, chunk_size: Optional[int], progress: bool
) -> Tensor:
    """log f(v) for v shaped (N, n_visible), shaped (N,), enumerating the odd layers o = (x_1, x_3, ...).

    log sum_{even hidden} f(v, o) = b_0.v + s (v W_0) . x_1 + G(o), with G(o) = sum_{odd l} b_l.x_l + sum over
    even hidden layers of sum_j softplus(their logits given o): G does not depend on v, so a chunk's (N x chunk)
    table is one product (N x n_1) @ (n_1 x chunk) plus G.
    """
    sizes, n = m.layer_sizes, v.shape[0]
    odd, even_hidden = list(range(1, m.num_layers, 2)), list(range(2, m.num_layers, 2))
    units = sum(sizes[l] for l in odd)
    base = torch.mv(v, m.biases[0])  # (N,)
    a = torch.mm(v, m.weights[0]).mul_(m.weight_scale)  # (N, n_1)
    widest = max(sizes[l] for l in even_hidden)
    # codes and bits, one even layer's logits (softplus in place), G and a bias product; the table: one per pair
    per_config = BYTES * (2 * units + widest + 4)
    c, nb = plan_chunks(2**units, n, per_config, BYTES, 0, max_bytes, chunk_size)
    acc = RunningLogSumExp(n, m.device)
    with progress_bar(progress, "exact log f(v)") as bar:
        grow_bar(bar, len(chunks(2**units, c)))
        for start, stop in chunks(2**units, c):
            parts = _split(binary_configurations(units, start, stop, device=m.device), odd, sizes)
            layers = [parts.get(l) for l in range(m.num_layers)]
            g = sum(torch.mv(parts[l], m.biases[l]) for l in odd)
            for l in even_hidden:
                g = g + softplus_(m.layer_logits(layers, l)).sum(-1)
            x1t = parts[1].t()
            for r0, r1 in chunks(n, nb):
                acc.add_(r0, r1, torch.addmm(g.unsqueeze(0), a[r0:r1], x1t))
            del parts, layers, g, x1t  # one chunk alive at a time
            bar.update(1)
    return acc.result() + base


def _log_f_even(
    m: LayeredBoltzmannMachine, v: Tensor, max_bytes: int, chunk_size: Optional[int], progress: bool
) -> Tensor:
    """log f(v) for v shaped (N, n_visible), shaped (N,), enumerating the even hidden layers e = (x_2, x_4, ...).

    log sum_{odd} f(v, e) = b_0.v + H(e) + sum_j softplus(b_1 + s (v W_0 + x_2 W_1^T))_j, with H(e) = sum of the
    even hidden layers' bias terms and the softplus sums of the odd layers above x_1 (which do not see v). Only
    the x_1 term mixes v and e: it costs n_1 softplus evaluations per (vector, configuration) pair.
    """
    sizes, n = m.layer_sizes, v.shape[0]
    odd, even_hidden = list(range(1, m.num_layers, 2)), list(range(2, m.num_layers, 2))
    units = sum(sizes[l] for l in even_hidden)
    base = torch.mv(v, m.biases[0])  # (N,)
    # x_1's logits from v: the input from x_2 is added per configuration (unscaled_input would need v again)
    a = torch.addmm(m.biases[1], v, m.weights[0], alpha=m.weight_scale)  # (N, n_1)
    widest = max([sizes[l] for l in odd[1:]], default=0)
    # codes and bits, x_2's input to x_1, one upper odd layer's logits, H and a bias product; per pair the
    # (vector, configuration, x_1 unit) logits and the table
    per_config = BYTES * (2 * units + sizes[1] + widest + 4)
    per_pair = BYTES * (sizes[1] + 1)
    c, nb = plan_chunks(2**units, n, per_config, per_pair, 0, max_bytes, chunk_size)
    acc = RunningLogSumExp(n, m.device)
    with progress_bar(progress, "exact log f(v)") as bar:
        grow_bar(bar, len(chunks(2**units, c)))
        for start, stop in chunks(2**units, c):
            parts = _split(binary_configurations(units, start, stop, device=m.device), even_hidden, sizes)
            layers = [parts.get(l) for l in range(m.num_layers)]
            h = sum(torch.mv(parts[l], m.biases[l]) for l in even_hidden)
            for l in odd[1:]:
                h = h + softplus_(m.layer_logits(layers, l)).sum(-1)
            from_x2 = torch.mm(parts[2], m.weights[1].t()).mul_(m.weight_scale)  # (c, n_1)
            for r0, r1 in chunks(n, nb):
                # the (nb, c, n_1) logits stay unnamed, so they are freed before the next block's are made
                acc.add_(r0, r1, softplus_(a[r0:r1].unsqueeze(1) + from_x2).sum(-1).add_(h))
            del parts, layers, h, from_x2  # one chunk alive at a time
            bar.update(1)
    return acc.result() + base


# ----------------------------------------------------------------------------------------------- DBNs
def _dbn_level(
    dbn: DBN,
    l: int,
    rows: Callable[[int, int], Tensor],
    n_rows: int,
    log_w: Callable[[int, int, Tensor], Tensor],
    w_bytes: int,
    max_bytes: int,
    chunk_size: Optional[int],
    bar,
    rows_generated: bool,
) -> Tensor:
    """log sum_{x_{l+1}} p(x_l = y | x_{l+1}) w(x_{l+1}) for each row y of layer l, shaped (n_rows,).

    rows(a, b): rows a..b-1 of layer l, shaped (b - a, n_l). log_w(start, stop, above): log w of the
    configurations start..stop-1 of layer l+1 (`above`, shaped (stop - start, n_{l+1})), shaped (stop - start,);
    w_bytes: its temporaries per configuration. With log p(y | x) = y.b_l + (y W_l) . x - S(x) and S(x) =
    sum_i softplus((W_l x)_i + b_li), the (rows x chunk) table is a product (rows x n_{l+1}) @ (n_{l+1} x chunk)
    plus per-configuration terms: never a (chunk x n_l) x rows product.
    """
    sizes = dbn.layer_sizes
    n_l, n_above = sizes[l], sizes[l + 1]
    weight, bias = dbn.weights[l], dbn.biases[l]
    # codes and bits of x_{l+1}, the generative logits (their sum with the bias, softplus in place), the column
    per_config = BYTES * (2 * n_above + 2 * n_l + 3) + w_bytes
    # y W_l and y.b_l per row (and the generated rows themselves)
    per_row = BYTES * (n_above + 2 + (2 * n_l if rows_generated else 0))
    c, nb = plan_chunks(2**n_above, n_rows, per_config, BYTES, per_row, max_bytes, chunk_size)
    blocks = chunks(n_rows, nb)
    base = torch.empty(n_rows, dtype=torch.float64, device=dbn.device)
    cached = None  # y W_l of the only block: computed once
    acc = RunningLogSumExp(n_rows, dbn.device)
    grow_bar(bar, len(chunks(2**n_above, c)))
    for i, (start, stop) in enumerate(chunks(2**n_above, c)):
        above = binary_configurations(n_above, start, stop, device=dbn.device)
        column = log_w(start, stop, above) - softplus_(dbn.generative_logits(above, l)).sum(-1)  # (c,)
        for r0, r1 in blocks:
            if cached is None or len(blocks) > 1:
                cached = None  # the previous block's product goes before this one's is made
                y = rows(r0, r1)
                cached = torch.mm(y, weight)  # (nb, n_{l+1})
                if i == 0:
                    base[r0:r1] = torch.mv(y, bias)
                del y
            acc.add_(r0, r1, torch.addmm(column.unsqueeze(0), cached, above.t()))
        del above, column  # one chunk alive at a time
        bar.update(1)
    return acc.result() + base


def _dbn_log_f(
    dbn: DBN,
    v: Optional[Tensor],
    log_top: Optional[Tensor],
    max_bytes: int,
    chunk_size: Optional[int],
    progress: bool,
) -> Tensor:
    """Push log weights over x_{L-1} down the directed layers of a float64 DBN.

    Returns log sum_{x_1..x_{L-1}} w(x_{L-1}) prod_l p(x_l | x_{l+1}) at the rows of v (shaped (N, n_visible);
    result (N,)), or for every visible configuration (result (2^n_visible,)) when v is None. The weights are
    exp(log_top) (shaped (2^n_{L-1},), index = `configuration_index`) or, when log_top is None, the top RBM's
    unnormalized marginal f_top.
    """
    sizes = dbn.layer_sizes
    top = len(dbn.weights) - 1  # x_top is the top RBM's visible layer
    n_top_hidden = sizes[top + 1]
    with progress_bar(progress, "exact log f(v)") as bar:
        if log_top is None and top == 1:
            # f_top computed per chunk of x_1: no table over x_1 at all
            def log_w(start, stop, above):
                return dbn.top.log_unnormalized_prob(above)

            w_bytes = BYTES * (2 * n_top_hidden + 2)
        else:
            if log_top is None:
                log_top = _top_marginal_table(dbn, max_bytes, chunk_size, bar)
            for l in range(top - 1, 0, -1):  # x_l given x_{l+1}, from the top down to x_1
                log_top = _dbn_level(
                    dbn,
                    l,
                    lambda a, b, l=l: binary_configurations(sizes[l], a, b, device=dbn.device),
                    2 ** sizes[l],
                    lambda start, stop, above, table=log_top: table[start:stop],
                    0,
                    max_bytes,
                    chunk_size,
                    bar,
                    rows_generated=True,
                )

            def log_w(start, stop, above, table=log_top):
                return table[start:stop]

            w_bytes = 0
        if v is None:
            rows, n_rows = (lambda a, b: binary_configurations(sizes[0], a, b, device=dbn.device)), 2 ** sizes[0]
        else:
            rows, n_rows = (lambda a, b: v[a:b]), v.shape[0]
        return _dbn_level(dbn, 0, rows, n_rows, log_w, w_bytes, max_bytes, chunk_size, bar, rows_generated=v is None)


def _top_marginal_table(dbn: DBN, max_bytes: int, chunk_size: Optional[int], bar) -> Tensor:
    """log f_top(x_{L-1}) for every configuration of x_{L-1} (index = `configuration_index`), in chunks."""
    top = dbn.top
    n, n_hidden = top.n_visible, top.n_hidden
    c, _ = plan_chunks(2**n, 1, BYTES * (2 * n + 2 * n_hidden + 2), 0, 0, max_bytes, chunk_size)
    out = torch.empty(2**n, dtype=torch.float64, device=top.device)
    grow_bar(bar, len(chunks(2**n, c)))
    for start, stop in chunks(2**n, c):
        # nothing of a chunk is named, so it is freed before the next one is built
        out[start:stop] = top.log_unnormalized_prob(binary_configurations(n, start, stop, device=top.device))
        bar.update(1)
    return out


# ----------------------------------------------------------------------------------------------- annealing model
def _joint_table(model: LayeredBoltzmannMachine) -> tuple[Tensor, Tensor, Tensor]:
    """log f over all (even, odd) configurations: (table |E| x |O|, even configs, odd configs)."""
    sizes = model.layer_sizes
    even, odd = _groups(model)
    n_even, n_odd = sum(sizes[l] for l in even), sum(sizes[l] for l in odd)
    e = binary_configurations(n_even, device=model.device)
    o = binary_configurations(n_odd, device=model.device)
    pe, po = _split(e, even, sizes), _split(o, odd, sizes)
    layers = []
    for l in range(model.num_layers):
        if l in pe:
            layers.append(pe[l].unsqueeze(1).expand(-1, o.shape[0], -1))
        else:
            layers.append(po[l].unsqueeze(0).expand(e.shape[0], -1, -1))
    return model.log_unnormalized_joint(layers), e, o


def block_gibbs_transition_matrix(model: LayeredBoltzmannMachine) -> Tensor:
    """T[e, e'] = sum_o p(o | e) p(e' | o) over even-layer configurations (codes as in `binary_configurations`
    over the concatenated even layers), in float64."""
    table, _, _ = _joint_table(model.to(dtype=torch.float64))
    p_odd_given_even = torch.softmax(table, dim=1)  # (E, O)
    p_even_given_odd = torch.softmax(table, dim=0)  # (E, O), columns sum to 1
    return p_odd_given_even @ p_even_given_odd.t()


def annealing_model_marginal(
    model: LayeredBoltzmannMachine, base_biases: Sequence[Tensor], betas: Tensor, *, max_units: int = 14
) -> Tensor:
    """p_ann(v) for every visible configuration v (index = `configuration_index(v)`), shaped (2^n_visible,).

    The forward chain starts from the base p_0 and applies T(beta_1), ..., T(beta_K), the collapsed block-Gibbs
    kernels of the geometric path, exactly as matrices. Tiny models only (all layers together <= max_units).
    For a DBN, `base_biases` are those of the top RBM's path: its annealing model over x_{L-1} is pushed down
    through the directed layers (the unrolled annealing model).
    """
    if model.family == "DBN":
        p_top = annealing_model_marginal(model.top, base_biases, betas, max_units=max_units)
        check_units(model.n_visible, max_units, "p_ann")
        check_units(_dbn_log_f_units(model), max_units, "a DBN's directed layers")
        m = model.to(dtype=torch.float64)
        return _dbn_log_f(m, None, p_top.log(), DEFAULT_MAX_BYTES, None, False).exp()
    m = model.to(dtype=torch.float64)
    base = [c.to(dtype=torch.float64, device=m.device) for c in base_biases]
    betas = torch.as_tensor(betas, dtype=torch.float64)
    return annealing_model_marginal_along([m.annealed(beta, base) for beta in betas.tolist()], max_units=max_units)


def annealing_model_marginal_along(models: Sequence[LayeredBoltzmannMachine], *, max_units: int = 14) -> Tensor:
    """p_ann(v) of the forward chain through any sequence of machines f_0, ..., f_K of one architecture (the points
    of an annealing path at its betas), shaped (2^n_visible,): x_0 ~ p_0 exactly, then the collapsed block-Gibbs
    kernels T_1, ..., T_K of f_1, ..., f_K as matrices, read off on the visible layer. Tiny models only."""
    if len(models) < 1:
        raise ValueError("need at least the start")
    first = models[0].to(dtype=torch.float64)
    check_units(sum(first.layer_sizes), max_units, "p_ann")
    table0, e, _ = _joint_table(first)
    p = torch.softmax(table0.flatten(), dim=0).reshape(table0.shape).sum(1)  # p_0 over even configurations
    for model in models[1:]:
        p = p @ block_gibbs_transition_matrix(model)
    # marginalize onto the visible layer: the first n_visible bits of the even code
    v_index = configuration_index(e[:, : first.n_visible])
    return torch.zeros(2**first.n_visible, dtype=torch.float64, device=first.device).index_add_(0, v_index, p)


def log_annealing_model(model, base_biases: Sequence[Tensor], betas: Tensor, v: Tensor) -> Tensor:
    """log p_ann(v) at the rows of v (N, n_visible), float64 shaped (N,): what RAISE's weights are unbiased for.
    (Typed layers: `exact.typed.log_annealing_model`.)"""
    return annealing_model_marginal(model, base_biases, betas)[configuration_index(v)].log()
