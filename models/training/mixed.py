"""Training RBMs of typed layers (Gaussian, categorical/Potts, spin or Bernoulli visible units; any hidden type) with
contrastive divergence (CD-k) or persistent contrastive divergence (PCD; Tieleman, 2008).

The log-likelihood gradient of an RBM is E_data[grad log f(v)] - E_model[grad log f(v)], log f(v) the visible
marginal (`MixedBoltzmannMachine.log_unnormalized_marginal([v, None])`, the hidden layer's log-normalizer summed
in closed form), so one loss serves every pairing: mean log f over the minibatch minus mean log f over the negative
particles (k block-Gibbs steps from the data for CD, from persistent fantasy particles for PCD), differentiated by
autograd, with Adam steps (learning rate decaying linearly) and L2 weight decay on W. A Gaussian layer's standard
deviations are fixed (not learned: learning them is notoriously unstable), its means are.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine
from raise_eval.models.boltzmann.units import Layer, make_layer
from torch import Tensor
from tqdm.auto import tqdm


@dataclass
class MixedRBMTrainingConfig:
    """Hyperparameters of `train_mixed_rbm`.

    hidden: the hidden layer's unit type; n_hidden its units (sites for categorical, with hidden_q states).
    sigma: standard deviation of every Gaussian visible unit (fixed); None takes each unit's standard deviation in
    the training data, at least sigma_floor. hidden_sigma: a Gaussian hidden layer's (fixed).
    """

    n_hidden: int
    hidden: str = "bernoulli"
    hidden_q: Optional[int] = None
    epochs: int = 10
    batch_size: int = 100
    learning_rate: float = 1e-2
    final_learning_rate_fraction: float = 0.1
    weight_decay: float = 1e-4
    method: str = "pcd"  # "pcd" or "cd"
    gibbs_steps: int = 1
    init_weight_std: float = 0.01
    sigma: Optional[float] = None
    sigma_floor: float = 0.1
    hidden_sigma: float = 1.0


def _initial_params(layer: Layer, data: Optional[Tensor], config: MixedRBMTrainingConfig, dtype, device) -> Tensor:
    """A layer's starting parameters: its independent fit to the data (visible), or zeros / N(0, hidden_sigma^2)."""
    if layer.kind == "gaussian":
        if data is None:
            lam = torch.full((layer.size,), 1.0 / config.hidden_sigma**2, dtype=dtype, device=device)
            return torch.stack([torch.zeros_like(lam), lam])
        x = data.double()
        sd = x.std(0) if config.sigma is None else torch.full((layer.size,), float(config.sigma), dtype=torch.float64)
        lam = 1.0 / sd.clamp(min=config.sigma_floor).to(x.device).square()
        return torch.stack([x.mean(0) * lam, lam]).to(dtype)
    zeros = torch.zeros(layer.param_shape, dtype=dtype, device=device)
    return zeros if data is None else layer.base_params(layer.statistics(data), zeros)


def train_mixed_rbm(
    data: Tensor,
    visible: Layer,
    config: MixedRBMTrainingConfig,
    *,
    generator: torch.Generator,
    progress: bool = False,
    callback: Optional[Callable[[int, MixedBoltzmannMachine], None]] = None,
    deadline: Optional[float] = None,
    desc: str = "training RBM",
    snapshot: Optional[Callable[[int, MixedBoltzmannMachine], None]] = None,
    snapshot_every: int = 0,
) -> tuple[MixedBoltzmannMachine, dict[str, Any]]:
    """Train an RBM whose visible layer is `visible` on `data`, its states (N, visible.width) on the device and in
    the dtype to train with (`visible.prepare` reads the usual forms). Returns (the model, a report: epochs, time,
    per-epoch mean log f(data) - mean log f(negative particles), the gap the gradient closes).

    Stops after the first minibatch that ends past `deadline` (time.monotonic()); the learning-rate schedule stays
    the one planned for `config.epochs`. `callback(epoch, model)` after each epoch. `snapshot(updates, model)`
    receives the training trajectory (as `train_rbm`'s does): the initial parameters (0 updates), the parameters
    after every `snapshot_every` updates and after the last one, each a detached copy.
    """
    if config.method not in ("pcd", "cd"):
        raise ValueError(f"method must be 'pcd' or 'cd', got {config.method!r}")
    if snapshot_every < 0 or (snapshot is not None and snapshot_every < 1):
        raise ValueError(f"snapshot_every must be a positive number of updates with a snapshot, got {snapshot_every}")
    n, width = data.shape
    if width != visible.width:
        raise ValueError(f"data have {width} columns; the visible layer {visible.describe()} has {visible.width}")
    dtype, device = data.dtype, data.device
    hidden = make_layer(config.hidden, config.n_hidden, q=config.hidden_q)
    W = torch.randn(visible.width, hidden.width, generator=generator, dtype=dtype, device=device)
    W = (W * config.init_weight_std).requires_grad_(True)
    vparams = _initial_params(visible, data, config, dtype, device)
    hparams = _initial_params(hidden, None, config, dtype, device)
    # A Gaussian layer learns its means (eta row), never its precisions.
    vlearn = vparams[0].clone().requires_grad_(True) if visible.kind == "gaussian" else vparams.requires_grad_(True)
    hlearn = hparams[0].clone().requires_grad_(True) if hidden.kind == "gaussian" else hparams.requires_grad_(True)

    def current() -> MixedBoltzmannMachine:
        v = torch.stack([vlearn, vparams[1]]) if visible.kind == "gaussian" else vlearn
        h = torch.stack([hlearn, hparams[1]]) if hidden.kind == "gaussian" else hlearn
        return MixedBoltzmannMachine._trusted([visible, hidden], [W], [v, h], 1.0)

    optimizer = torch.optim.Adam([W, vlearn, hlearn], lr=config.learning_rate)
    batches = max(1, n // config.batch_size)
    total = max(1, config.epochs * batches)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda u: 1 - (1 - config.final_learning_rate_fraction) * min(u, total) / total
    )
    fantasy = data[torch.randint(0, n, (config.batch_size,), generator=generator, device=device)].clone()
    update, stopped, gaps = 0, False, []
    if snapshot is not None:
        with torch.no_grad():
            snapshot(0, _detached(current()))
    start = time.monotonic()
    for epoch in tqdm(range(config.epochs), desc=desc, disable=not progress):
        order = torch.randperm(n, generator=generator, device=device)
        gap_sum = 0.0
        for b in range(batches):
            v0 = data[order[b * config.batch_size : (b + 1) * config.batch_size]]
            with torch.no_grad():
                model = current()
                vk = fantasy if config.method == "pcd" else v0
                for _ in range(config.gibbs_steps):
                    h = model.sample_layer([vk, None], 1, generator)
                    vk = model.sample_layer([None, h], 0, generator)
                if config.method == "pcd":
                    fantasy = vk
            model = current()
            positive = model.log_unnormalized_marginal([v0, None]).mean()
            gap = positive - model.log_unnormalized_marginal([vk, None]).mean()
            loss = -gap + 0.5 * config.weight_decay * W.square().sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            gap_sum += float(gap.detach())
            update += 1
            if snapshot is not None and update % snapshot_every == 0:
                with torch.no_grad():
                    snapshot(update, _detached(current()))
            if deadline is not None and time.monotonic() > deadline and update < total:
                stopped = True
                break
        for t in (W, vlearn, hlearn):
            if not bool(torch.isfinite(t).all()):
                raise FloatingPointError(f"{desc}: parameters became NaN or infinite; lower the learning rate")
        gaps.append(gap_sum / (b + 1))
        if callback is not None:
            with torch.no_grad():
                callback(epoch, _detached(current()))
        if stopped:
            break
    if snapshot is not None and update % snapshot_every != 0:
        with torch.no_grad():
            snapshot(update, _detached(current()))  # the last parameters, when no multiple of snapshot_every
    report = {
        "epochs_completed": update / batches,
        "epochs_planned": config.epochs,
        "stopped_by_budget": stopped,
        "seconds": time.monotonic() - start,
        "log_f_gap": gaps,
    }
    with torch.no_grad():
        return _detached(current()), report


def _detached(model: MixedBoltzmannMachine) -> MixedBoltzmannMachine:
    return MixedBoltzmannMachine(
        model.layers, [w.detach().clone() for w in model.weights], [b.detach().clone() for b in model.biases]
    )
