"""Training binary RBMs with contrastive divergence (CD-k) or persistent contrastive divergence (PCD).

Plain minibatch stochastic gradient with momentum and L2 weight decay; the log-likelihood gradient
<v h^T>_data - <v h^T>_model is estimated with hidden probabilities for the data term and k block-Gibbs steps
from the data (CD) or from persistent fantasy particles (PCD; Tieleman, 2008) for the model term.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

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
) -> RBM:
    """Train an RBM on binary `data` (N, n_visible) and return it.

    Args:
        data: binary training vectors on the device and in the dtype to train with.
        config: hyperparameters.
        generator: the only source of randomness (minibatch order, Gibbs sampling).
        progress: tqdm bar over epochs.
        callback: called as callback(epoch, model) after each epoch (e.g. to log a validation score).
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
    update = 0
    for epoch in tqdm(range(config.epochs), desc="training RBM", disable=not progress):
        order = torch.randperm(n, generator=generator, device=device)
        momentum = config.initial_momentum if epoch < config.momentum_switch_epoch else config.momentum
        for b in range(batches):
            model = RBM(W, vbias, hbias)
            v0 = data[order[b * config.batch_size : (b + 1) * config.batch_size]]
            h0 = model.hidden_probs(v0)
            vk = fantasy if config.method == "pcd" else v0
            for _ in range(config.gibbs_steps):
                vk = model.sample_visible(model.sample_hidden(vk, generator), generator)
            if config.method == "pcd":
                fantasy = vk
            hk = model.hidden_probs(vk)
            lr = config.learning_rate * (1 - (1 - config.final_learning_rate_fraction) * update / total_updates)
            grads = (
                (v0.t() @ h0) / len(v0) - (vk.t() @ hk) / len(vk) - config.weight_decay * W,
                v0.mean(0) - vk.mean(0),
                h0.mean(0) - hk.mean(0),
            )
            for vel, grad in zip(velocity, grads):
                vel.mul_(momentum).add_(grad, alpha=lr)
            W, vbias, hbias = W + velocity[0], vbias + velocity[1], hbias + velocity[2]
            update += 1
        if callback is not None:
            callback(epoch, RBM(W, vbias, hbias))
    return RBM(W, vbias, hbias)
