"""How close BDMC's HMC transitions come to the decoder passes they cannot avoid.

An HMC transition with L leapfrog steps needs L evaluations of log p(x | z) and its gradient: L decoder forward
and backward passes (the gradient at the start is the one the previous transition ended with, and the
log-density at the end of the trajectory comes with the last gradient). This script times, in one run:

- hmc: K annealing transitions of BDMC's forward AIS (HMC with L leapfrog steps, per-example step sizes from a
  step-size schedule, the weight updates) on a `DecoderModel`;
- bare: the K L forward and backward passes alone, written in plain PyTorch: z.requires_grad_(), logits =
  decoder(z), log p(x | z) = sum(x logits - softplus(logits)), torch.autograd.grad;
- decoder only: the K L passes of the decoder network alone (forward, and backward from a fixed cotangent).

and prints hmc / bare (the ratio brought close to 1) and hmc / decoder-only, three repetitions, together with
the number of decoder forward passes the HMC run made (counted by a forward hook). The three alternate in blocks
of 10 transitions, so that a shared machine's changing load falls on all of them alike. Default model: a
784-200-200-50 ELU decoder (the plain VAE of scripts/train_vae_plain.py, random weights: timing does not depend
on them), Bernoulli likelihood, 50 examples x 4 chains, K = 100, L = 10, one thread.

    python scripts/benchmark_hmc.py [--examples 50] [--chains 4] [--steps 100] [--leapfrog 10] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from raise_eval import DecoderModel, DirectedPath, anneal, make_schedule
from raise_eval.kernels import HMCKernel, StepSizeSchedule


def elu_mlp(*sizes: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ELU()]
    return nn.Sequential(*layers[:-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=50)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--steps", type=int, default=100, help="annealing transitions K per repetition (blocks of 10)")
    parser.add_argument("--leapfrog", type=int, default=10)
    parser.add_argument("--latent-dim", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)  # the decoder's initialization only
    decoder = elu_mlp(args.latent_dim, 200, 200, 784)  # parameters require grad, as a user's module's do
    model = DecoderModel(decoder, latent_dim=args.latent_dim, likelihood="bernoulli")
    g = torch.Generator().manual_seed(0)
    _, x = model.sample_joint(args.examples, g)
    path = DirectedPath(model, x)
    # Per-example step sizes varying with beta, as a pilot run leaves them (a 501-point grid).
    grid = torch.linspace(0, 1, 501, dtype=torch.float64)
    log_eps = torch.log(0.05 + 0.1 * torch.rand(501, args.examples, 1, 1, generator=g))
    kernel = HMCKernel(path, StepSizeSchedule(grid, log_eps), num_leapfrog=args.leapfrog)
    betas = make_schedule("sigmoid", args.steps)
    start = path.sample_initial(args.chains, g)

    calls = [0]
    handle = decoder.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))

    block = 10  # transitions per timed block: the three kinds of work alternate block by block (see below)
    blocks = -(-args.steps // block)
    z_flat = start.z.reshape(-1, args.latent_dim)
    chains = {"hmc": start, "bare": z_flat, "decoder": z_flat}

    def run_hmc(j: int) -> None:
        piece = betas[j * block : (j + 1) * block + 1]
        chains["hmc"], _ = anneal(path, chains["hmc"], piece, generator=g, kernel=kernel)

    x_flat = x.unsqueeze(1).expand(-1, args.chains, -1).reshape(-1, 784)

    def run_bare(j: int) -> None:
        z = chains["bare"]
        for _ in range(block * args.leapfrog):
            zz = z.detach().requires_grad_(True)
            logits = decoder(zz)
            log_lik = (x_flat * logits - F.softplus(logits)).sum(-1)
            (grad,) = torch.autograd.grad(log_lik.sum(), zz)
            z = z + 1e-3 * grad  # a dependent chain of passes, as in a trajectory
        chains["bare"] = z

    cotangent = torch.randn(x_flat.shape[0], 784, generator=g)

    def run_decoder_only(j: int) -> None:
        z = chains["decoder"]
        for _ in range(block * args.leapfrog):
            zz = z.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(decoder(zz), zz, cotangent)
            z = z + 1e-3 * grad
        chains["decoder"] = z

    def timed(fn, j: int) -> float:
        begin = time.perf_counter()
        fn(j)
        return time.perf_counter() - begin

    run_bare(0), run_hmc(0), run_decoder_only(0)  # warm-up
    calls[0] = 0
    run_hmc(1)
    per_transition = calls[0] / block
    handle.remove()
    print(
        f"decoder {args.latent_dim}-200-200-784 (ELU), Bernoulli; {args.examples} examples x {args.chains} chains; "
        f"K = {args.steps} transitions of L = {args.leapfrog} leapfrog steps; {args.threads} thread(s); torch "
        f"{torch.__version__}"
    )
    print(f"decoder forward passes per HMC transition: {per_transition:g} (L = {args.leapfrog})")
    ratios, ratios_net = [], []
    for rep in range(args.repetitions):
        # Blocks of 10 transitions alternate (bare, hmc, decoder-only, bare, ...) through the K transitions, so
        # that a change in the machine's load (another process on a shared core) touches all three alike.
        t_bare = t_hmc = t_net = 0.0
        for j in range(blocks):
            t_bare += timed(run_bare, j)
            t_hmc += timed(run_hmc, j)
            t_net += timed(run_decoder_only, j)
        ratios.append(t_hmc / t_bare)
        ratios_net.append(t_hmc / t_net)
        print(
            f"run {rep + 1}: hmc {t_hmc:.3f} s, bare log-likelihood passes {t_bare:.3f} s, decoder-only passes "
            f"{t_net:.3f} s; hmc / bare = {ratios[-1]:.3f}, hmc / decoder-only = {ratios_net[-1]:.3f}"
        )
    print(
        f"median over {args.repetitions} runs: hmc / bare = {statistics.median(ratios):.3f}, "
        f"hmc / decoder-only = {statistics.median(ratios_net):.3f}"
    )


if __name__ == "__main__":
    main()
