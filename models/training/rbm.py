"""Training binary RBMs with contrastive divergence (CD-k) or persistent contrastive divergence (PCD).

Plain minibatch stochastic gradient with momentum and L2 weight decay; the log-likelihood gradient
<v h^T>_data - <v h^T>_model is estimated with hidden probabilities for the data term and k block-Gibbs steps
from the data (CD) or from persistent fantasy particles (PCD; Tieleman, 2008) for the model term.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from raise_eval.models.boltzmann.rbm import RBM
from torch import Tensor
from tqdm.auto import tqdm


@dataclass
class RBMTrainingConfig:
    """Hyperparameters of `train_rbm`.

    learning_rate decays linearly to `final_learning_rate_fraction` of itself over training; momentum rises
    from `initial_momentum` to `momentum` after `momentum_switch_epoch` epochs.
    """

    n_hidden: int
    epochs: int = 100
    batch_size: int = 100
    learning_rate: float = 0.05
    final_learning_rate_fraction: float = 0.1
    initial_momentum: float = 0.5
    momentum: float = 0.9
    momentum_switch_epoch: int = 5
    weight_decay: float = 1e-4
    method: str = "pcd"  # "pcd" or "cd"
    gibbs_steps: int = 1
    init_weight_std: float = 0.01


def train_rbm(
    data: Tensor,
    config: RBMTrainingConfig,
    *,
    generator: torch.Generator,
    progress: bool = False,
    callback: Optional[Callable[[int, RBM], None]] = None,
    deadline: Optional[float] = None,
    snapshot: Optional[Callable[[int, RBM], None]] = None,
    snapshot_every: int = 0,
) -> RBM:
    """Train an RBM on binary `data` (N, n_visible) and return it.

    Args:
        data: binary training vectors on the device and in the dtype to train with.
        config: hyperparameters.
        generator: the only source of randomness (minibatch order, Gibbs sampling).
        progress: tqdm bar over epochs.
        callback: called as callback(epoch, model) after each epoch, epoch counting from 0 (e.g. a
            `raise_eval.hooks.LikelihoodMonitor`).
        deadline: stop after the first minibatch that ends past this time.monotonic() value.
        snapshot, snapshot_every: the training trajectory: snapshot(updates, model) with the initial parameters
            (0 updates), after every `snapshot_every` updates and after the last one (e.g. to save checkpoints for
            `raise-eval trajectory`); the model's tensors are not changed afterwards.
    """
    model, _ = train_scaled_rbm(
        data, config, 1.0, 1.0, generator=generator, progress=progress, callback=callback, deadline=deadline,
        snapshot=snapshot, snapshot_every=snapshot_every,
    )  # fmt: skip
    return model


def _check_finite(what: str, tensors) -> None:
    for t in tensors:
        if not bool(torch.isfinite(t).all()):
            raise FloatingPointError(f"{what}: parameters became NaN or infinite; lower the learning rate")


def train_scaled_rbm(
    data: Tensor,
    config: RBMTrainingConfig,
    up: float,
    down: float,
    *,
    generator: torch.Generator,
    progress: bool = False,
    deadline: Optional[float] = None,
    callback: Optional[Callable[[int, RBM], None]] = None,
    desc: str = "training RBM",
    snapshot: Optional[Callable[[int, RBM], None]] = None,
    snapshot_every: int = 0,
) -> tuple[RBM, dict[str, Any]]:
    """Train an RBM whose weight matrix W is used as up * W bottom-up and down * W top-down (up = down = 1: a
    plain RBM, which `train_rbm` trains; 2 and 1 or 1 and 2: the doubled RBMs of DBM pretraining). Returns
    (RBM(W, vbias, hbias) holding the shared W, a report with epochs, time and per-epoch reconstruction errors
    under the doubled conditionals). Training stops after the first minibatch that ends past `deadline`
    (time.monotonic()); the learning-rate schedule stays the one planned for `config.epochs`. `snapshot` and
    `snapshot_every` as in `train_rbm`.
    """
    if config.method not in ("pcd", "cd"):
        raise ValueError(f"method must be 'pcd' or 'cd', got {config.method!r}")
    n, n_visible = data.shape
    dtype, device = data.dtype, data.device
    W = (
        torch.randn(n_visible, config.n_hidden, generator=generator, dtype=dtype, device=device)
        * config.init_weight_std
    )
    mean = data.double().mean(0).clamp(1e-3, 1 - 1e-3)
    vbias = (torch.log(mean) - torch.log1p(-mean)).to(dtype)
    hbias = torch.zeros(config.n_hidden, dtype=dtype, device=device)
    velocity = [torch.zeros_like(p) for p in (W, vbias, hbias)]
    fantasy = data[torch.randint(0, n, (config.batch_size,), generator=generator, device=device)].clone()
    batches = max(1, n // config.batch_size)
    total_updates = config.epochs * batches
    update, stopped, errors = 0, False, []
    if snapshot_every < 0 or (snapshot is not None and snapshot_every < 1):
        raise ValueError(f"snapshot_every must be a positive number of updates with a snapshot, got {snapshot_every}")
    if snapshot is not None:
        snapshot(0, RBM(W, vbias, hbias))
    start = time.monotonic()
    for epoch in tqdm(range(config.epochs), desc=desc, disable=not progress):
        order = torch.randperm(n, generator=generator, device=device)
        momentum = config.initial_momentum if epoch < config.momentum_switch_epoch else config.momentum
        error_sum = 0.0
        for b in range(batches):
            upward = RBM._trusted([W], [vbias, hbias], up)
            downward = RBM._trusted([W], [vbias, hbias], down)
            v0 = data[order[b * config.batch_size : (b + 1) * config.batch_size]]
            h0 = upward.hidden_probs(v0)
            vk = fantasy if config.method == "pcd" else v0
            for _ in range(config.gibbs_steps):
                vk = downward.sample_visible(upward.sample_hidden(vk, generator), generator)
            if config.method == "pcd":
                fantasy = vk
            hk = upward.hidden_probs(vk)
            lr = config.learning_rate * (1 - (1 - config.final_learning_rate_fraction) * update / total_updates)
            grads = (
                (v0.t() @ h0) / len(v0) - (vk.t() @ hk) / len(vk) - config.weight_decay * W,
                v0.mean(0) - vk.mean(0),
                h0.mean(0) - hk.mean(0),
            )
            error_sum += float((downward.visible_probs(h0) - v0).pow(2).mean())
            for vel, grad in zip(velocity, grads):
                vel.mul_(momentum).add_(grad, alpha=lr)
            W, vbias, hbias = W + velocity[0], vbias + velocity[1], hbias + velocity[2]
            update += 1
            if snapshot is not None and update % snapshot_every == 0:
                snapshot(update, RBM(W, vbias, hbias))
            if deadline is not None and time.monotonic() > deadline and update < total_updates:
                stopped = True
                break
        _check_finite(desc, (W, vbias, hbias))
        errors.append(error_sum / (b + 1))
        if callback is not None:
            callback(epoch, RBM(W, vbias, hbias))
        if stopped:
            break
    if snapshot is not None and update % snapshot_every != 0:
        snapshot(update, RBM(W, vbias, hbias))  # the last parameters, when no multiple of snapshot_every
    report = {
        "epochs_completed": update / batches,
        "epochs_planned": config.epochs,
        "stopped_by_budget": stopped,
        "seconds": time.monotonic() - start,
        "reconstruction_error": errors,
        "up": up,
        "down": down,
    }
    return RBM(W, vbias, hbias), report
