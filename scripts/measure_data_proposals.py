"""Data-driven proposals for an RBM's log Z along a saved training run, against exact log Z (issue 44): a measured
negative result, kept to be rerun.

The training data say where a trained RBM's modes are likely to be. Each training vector v_n gives a factorial
distribution over the hidden units, q_n(h) = prod_j Bernoulli(h_j; sigmoid(c + W^T v_n)_j), and their mixture
q(h) = mean_n q_n(h) (over --components vectors drawn from the training set) can be sampled exactly and its density
computed. The hidden marginal of a binary RBM is tractable up to Z: log f(h) = c.h + sum_i softplus(b_i + W_i.h).
Four uses of q, each unbiased for Z (tested against enumeration in tests/scripts/test_measure_data_proposals.py):

- importance: plain importance sampling, Z-hat = mean f(h) / q(h), h ~ q;
- mixture-ais: AIS in (n, h) from pi_0(n, h) = q_n(h) / N to f(h) / N along pi_beta ∝ q_n(h)^(1 - beta) f(h)^beta,
  moved at every beta by a Metropolis step on n (a uniform proposal) and a Gibbs scan of the hidden units;
- jumps-temperature: SMC along each checkpoint's temperature path from the data base rates (the visible state, the
  hidden units summed out, as raise-eval's), block Gibbs plus an independence Metropolis jump of h in the hidden
  marginal at beta with q (built at beta's parameters) as proposal, then v ~ p_beta(v | h);
- jumps-trajectory: the same kernel along the training trajectory (base rates, then the checkpoints in order, the
  parameters interpolated linearly), one SMC run for every checkpoint;
- modes: the exact hidden marginal (2^H states) beside q: the most probable states' mass under p and under q, and
  its overlap with the previous checkpoint's (the Bhattacharyya coefficient).

For a folder of one 784-20 RBM run's checkpoints (`scripts/train_rbm_paper.py mnistPCD-20 --threads 1
--save-trajectory DIR --trajectory-every 500`) and the exact log Z of each (`measure_trajectory_adaptive.py --part
exact`'s exact.json). One thread; prints a line per checkpoint and a summary, and writes --out/PART.json.

    python scripts/measure_data_proposals.py runs/pcd20 --exact results/trajectory/rbm_mnist_pcd20_adaptive/exact.json \
        --out results/trajectory/rbm_mnist_pcd20_proposals --part importance --chains 2000
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from raise_eval import load_checkpoint, load_dataset

PARTS = ("importance", "mixture-ais", "jumps-temperature", "jumps-trajectory", "modes")


def log_f_hidden(W: Tensor, b: Tensor, c: Tensor, h: Tensor) -> Tensor:
    """log f(h) (M,) float64 of a binary RBM's hidden marginal; W (V, H), b (V,), c (H,), h (M, H)."""
    return (h @ c).double() + F.softplus((h @ W.T + b).double()).sum(-1)


def log_f_visible(W: Tensor, b: Tensor, c: Tensor, v: Tensor) -> Tensor:
    """log f(v) (M,) float64 of a binary RBM's visible marginal; v (M, V)."""
    W, b, c, v = W.double(), b.double(), c.double(), v.double()
    return v @ b + F.softplus(v @ W + c).sum(-1)


class Mixture:
    """q(h) = mean_n prod_j Bernoulli(h_j; sigmoid(c + W^T v_n)_j) for the components v_n (N, V)."""

    def __init__(self, W: Tensor, c: Tensor, components: Tensor):
        logits = components @ W + c  # (N, H)
        self.log_p1, self.log_p0 = F.logsigmoid(logits).double(), F.logsigmoid(-logits).double()
        self.probs = torch.sigmoid(logits)

    @property
    def size(self) -> int:
        return self.probs.shape[0]

    def sample(self, m: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """(n (M,), h (M, H)) drawn from q_n(h) / N."""
        n = torch.randint(self.size, (m,), generator=generator, device=self.probs.device)
        u = torch.rand(m, self.probs.shape[1], generator=generator, dtype=self.probs.dtype, device=self.probs.device)
        return n, (u < self.probs[n]).to(self.probs.dtype)

    def log_component(self, n: Tensor, h: Tensor) -> Tensor:
        """log q_n(h) (M,) float64."""
        h = h.double()
        return (h * self.log_p1[n] + (1 - h) * self.log_p0[n]).sum(-1)

    def log_density(self, h: Tensor) -> Tensor:
        """log q(h) (M,) float64."""
        h = h.double()
        table = h @ (self.log_p1 - self.log_p0).T + self.log_p0.sum(-1)  # (M, N)
        return torch.logsumexp(table, 1) - math.log(self.size)


def log_mean_exp(x: Tensor) -> float:
    return float(torch.logsumexp(x, 0)) - math.log(x.numel())


def ess(log_w: Tensor) -> float:
    p = torch.softmax(log_w, 0)
    return float(1.0 / (p * p).sum())


def importance(W, b, c, components, chains: int, generator: torch.Generator) -> dict:
    """Importance sampling with q: log Z-hat, ESS."""
    q = Mixture(W, c, components)
    _, h = q.sample(chains, generator)
    log_w = log_f_hidden(W, b, c, h) - q.log_density(h)
    return {"log_z": log_mean_exp(log_w), "ess": ess(log_w)}


def groups_estimate(log_w: Tensor, folded: Tensor) -> dict:
    """log Z-hat (the groups' Z-hats averaged) and its standard error over the G groups; log_w (G, M/G)."""
    z = folded + torch.logsumexp(log_w, 1) - math.log(log_w.shape[1])
    log_z = float(torch.logsumexp(z, 0)) - math.log(z.numel())
    se = float(torch.exp(z - log_z).std() / math.sqrt(z.numel())) if z.numel() > 1 else float("nan")
    return {"log_z": log_z, "stderr": se, "ess": ess(log_w.reshape(-1))}


def mixture_move(q: Mixture, W, b, c, n: Tensor, h: Tensor, beta: float, generator) -> tuple[Tensor, Tensor]:
    """One transition leaving pi_beta(n, h) ∝ q_n(h)^(1 - beta) f(h)^beta invariant: Metropolis on n (a uniform
    proposal), then a Gibbs scan of the hidden units in random order. (n (M,), h (M, H)) -> the same."""
    m = n.shape[0]
    proposal = torch.randint(q.size, (m,), generator=generator, device=h.device)
    log_accept = (1 - beta) * (q.log_component(proposal, h) - q.log_component(n, h))
    u = torch.rand(m, generator=generator, dtype=torch.float64, device=h.device)
    n = torch.where(u.log() < log_accept, proposal, n)
    h = h.clone()
    act = h @ W.T + b  # recomputed every scan: no drift from the flips' updates in float32
    for j in torch.randperm(h.shape[1], generator=generator).tolist():
        on = act + (1 - h[:, j : j + 1]) * W[:, j]
        off = act - h[:, j : j + 1] * W[:, j]
        d_f = c[j].double() + F.softplus(on.double()).sum(-1) - F.softplus(off.double()).sum(-1)
        d_q = q.log_p1[n, j] - q.log_p0[n, j]
        p_on = torch.sigmoid(beta * d_f + (1 - beta) * d_q)
        h_j = torch.rand(m, generator=generator, dtype=torch.float64, device=h.device) < p_on
        act = torch.where(h_j[:, None], on, off)
        h[:, j] = h_j.to(h.dtype)
    return n, h


def mixture_ais(W, b, c, components, chains: int, steps: int, groups: int, generator: torch.Generator) -> dict:
    """AIS in (n, h) from q_n(h) / N to f(h) / N (module docstring)."""
    q = Mixture(W, c, components)
    n, h = q.sample(chains, generator)
    log_w = torch.zeros(chains, dtype=torch.float64, device=h.device)
    betas = torch.linspace(0, 1, steps + 1, dtype=torch.float64)
    for k in range(1, steps + 1):
        beta = float(betas[k])
        log_w += (beta - float(betas[k - 1])) * (log_f_hidden(W, b, c, h) - q.log_component(n, h))
        n, h = mixture_move(q, W, b, c, n, h, beta, generator)
    return groups_estimate(log_w.view(groups, -1), torch.zeros(groups, dtype=torch.float64))


class JumpSMC:
    """SMC on the visible state (hidden units summed out) along a piecewise-linear path of RBM parameters, block
    Gibbs plus a data-driven jump at every sub-step, resampled within each of `groups` groups below `resample` of
    its chains' ESS (0: plain AIS)."""

    def __init__(self, start: tuple, components: Tensor, chains: int, groups: int, resample: float, generator):
        W, b, _ = start
        self.components, self.groups, self.resample, self.generator = components, groups, resample, generator
        u = torch.rand(chains, W.shape[0], generator=generator, dtype=W.dtype, device=W.device)
        self.v = (u < torch.sigmoid(b)).to(W.dtype)  # the start has no weights: exact samples
        self.log_w = torch.zeros(chains, dtype=torch.float64, device=W.device)
        self.folded = torch.zeros(groups, dtype=torch.float64, device=W.device)
        if bool(W.any()):
            raise ValueError(
                "the start must have no weights (its log Z and exact samples are those of independent units)"
            )
        self.log_z0 = float(F.softplus(b.double()).sum() + F.softplus(start[2].double()).sum())
        self.accepted: list[float] = []

    def anneal(self, a: tuple, z: tuple, steps: int) -> None:
        """From parameters `a` to `z` (each (W, b, c)) in `steps` evenly spaced sub-steps."""
        for k in range(1, steps + 1):
            before = tuple((1 - (k - 1) / steps) * x + (k - 1) / steps * y for x, y in zip(a, z))
            here = tuple((1 - k / steps) * x + k / steps * y for x, y in zip(a, z))
            self.log_w += log_f_visible(*here, self.v) - log_f_visible(*before, self.v)
            self._resample()
            self.v = self._move(here)

    def _move(self, params: tuple) -> Tensor:
        W, b, c = params
        g, m = self.generator, self.v.shape[0]
        h = torch.rand(m, W.shape[1], generator=g, dtype=W.dtype, device=W.device) < torch.sigmoid(self.v @ W + c)
        h = h.to(W.dtype)
        q = Mixture(W, c, self.components)
        _, proposal = q.sample(m, g)
        log_accept = (log_f_hidden(W, b, c, proposal) - q.log_density(proposal)) - (
            log_f_hidden(W, b, c, h) - q.log_density(h)
        )
        accept = torch.rand(m, generator=g, dtype=torch.float64, device=W.device).log() < log_accept
        self.accepted.append(float(accept.double().mean()))
        h = torch.where(accept[:, None], proposal, h)
        u = torch.rand(m, W.shape[0], generator=g, dtype=W.dtype, device=W.device)
        return (u < torch.sigmoid(h @ W.T + b)).to(W.dtype)

    def _resample(self) -> None:
        if self.resample <= 0:
            return
        g, m = self.groups, self.log_w.numel()
        per = m // g
        log_w = self.log_w.view(g, per)
        p = torch.softmax(log_w, 1)
        low = 1.0 / (p * p).sum(1) < self.resample * per
        if not bool(low.any()):
            return
        self.folded[low] += torch.logsumexp(log_w[low], 1) - math.log(per)
        cdf = p.cumsum(1)
        cdf[:, -1] = 1.0
        u = torch.rand(g, 1, generator=self.generator, dtype=torch.float64, device=p.device)
        index = torch.searchsorted(cdf, (u + torch.arange(per, dtype=torch.float64, device=p.device)) / per)
        index = index.clamp(max=per - 1) + (torch.arange(g, device=p.device) * per)[:, None]
        keep = torch.arange(m, device=p.device).view(g, per)
        chosen = torch.where(low[:, None], index, keep).reshape(-1)
        self.v = self.v[chosen]
        self.log_w = torch.where(low[:, None], torch.zeros_like(log_w), log_w).reshape(-1)

    def estimate(self) -> dict:
        out = groups_estimate(self.log_w.view(self.groups, -1), self.folded)
        out["log_z"] += self.log_z0
        return out


def exact_modes(W, b, c, components, top: int = 8, previous: Tensor | None = None) -> tuple[dict, Tensor]:
    """The exact hidden marginal p (all 2^H states, float64) beside q: (log Z, the `top` states' mass under p and q,
    p's mass where p / q > 100, and the overlap sum_h sqrt(p(h) p'(h)) with `previous`, the p' of another model;
    p (2^H,))."""
    H = W.shape[1]
    q = Mixture(W.double(), c.double(), components.double())
    log_f = torch.empty(2**H, dtype=torch.float64)
    log_q = torch.empty_like(log_f)
    codes = torch.arange(2**H)
    for s in range(0, 2**H, 65536):
        h = ((codes[s : s + 65536, None] >> torch.arange(H)) & 1).double()
        log_f[s : s + 65536] = log_f_hidden(W.double(), b.double(), c.double(), h)
        log_q[s : s + 65536] = q.log_density(h)
    log_z = torch.logsumexp(log_f, 0)
    p = (log_f - log_z).exp()
    order = torch.argsort(p, descending=True)[:top]
    overlap = None if previous is None else float((p * previous).sqrt().sum())
    return {"log_z": float(log_z), "top_p": p[order].tolist(), "top_q": log_q[order].exp().tolist(),
            "p_mass_where_p_over_q_above_100": float(p[(log_f - log_z - log_q) > math.log(100)].sum()),
            "overlap_with_previous": overlap}, p  # fmt: skip


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a run's checkpoints, step_<updates>.pt")
    parser.add_argument("--exact", required=True, help="exact.json (log_z and steps of every checkpoint)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--part", required=True, choices=PARTS)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--components", type=int, default=1000, help="training vectors in the mixture q")
    parser.add_argument("--chains", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=100, help="sub-steps (per link, or per temperature path)")
    parser.add_argument("--groups", type=int, default=10, help="replicate groups (standard errors, resampling)")
    parser.add_argument("--resample", type=float, default=0.5, help="jumps: resample below this ESS fraction")
    parser.add_argument(
        "--every",
        type=int,
        default=1,
        help="every Nth checkpoint (and the last); modes: the overlap is then with the Nth before",
    )
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    generator = torch.Generator().manual_seed(args.seed)
    files = sorted(Path(args.folder).glob("step_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    steps = [int(p.stem.split("_")[1]) for p in files]
    saved = json.loads(Path(args.exact).read_text())
    truth = dict(zip(saved["steps"], saved["log_z"]))
    train = load_dataset("binarized_mnist", "train", data_root=args.data_root)
    components = train[torch.randperm(train.shape[0], generator=generator)[: args.components]].to(dtype)
    params = []
    for f in files:
        m = load_checkpoint(f).model
        params.append((m.W.to(dtype), m.vbias.to(dtype), m.hbias.to(dtype)))
    means = train.double().mean(0).clamp(1e-3, 1 - 1e-3)
    base = (torch.zeros_like(params[0][0]), (means.log() - (-means).log1p()).to(dtype), torch.zeros_like(params[0][2]))
    wanted = [i for i in range(len(files)) if i % args.every == 0 or i == len(files) - 1]
    rows, start = [], time.perf_counter()
    smc = marginal = None
    for i in range(len(files)) if args.part == "jumps-trajectory" else wanted:
        if args.part == "importance":
            row = importance(*params[i], components, args.chains, generator)
        elif args.part == "mixture-ais":
            row = mixture_ais(*params[i], components, args.chains, args.steps, args.groups, generator)
        elif args.part == "modes":
            row, marginal = exact_modes(*params[i], components, previous=marginal)
        else:
            if args.part == "jumps-temperature" or smc is None:
                smc = JumpSMC(base, components, args.chains, args.groups, args.resample, generator)
            smc.anneal(base if args.part == "jumps-temperature" or i == 0 else params[i - 1], params[i], args.steps)
            row = smc.estimate()
            row["jump_acceptance_last_steps"] = sum(smc.accepted[-args.steps :]) / args.steps
            if i not in wanted:
                continue
        row.update(step=steps[i], exact=truth.get(steps[i]), seconds=time.perf_counter() - start)
        row["error"] = row["log_z"] - row["exact"] if row["exact"] is not None else None
        rows.append(row)
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items() if not k.startswith("top")}
        print(json.dumps(shown), flush=True)
    errors = [abs(r["error"]) for r in rows if r["error"] is not None]
    summary = {"part": args.part, "settings": vars(args), "seconds": time.perf_counter() - start,
               "mean_abs_error": sum(errors) / len(errors), "max_abs_error": max(errors),
               "within_0.1": sum(e < 0.1 for e in errors), "compared": len(errors)}  # fmt: skip
    print(json.dumps({k: v for k, v in summary.items() if k != "settings"}))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.part}.json").write_text(json.dumps({**summary, "checkpoints": rows}, indent=1))


if __name__ == "__main__":
    main()
