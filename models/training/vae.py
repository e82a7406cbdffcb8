"""Training a VAE: maximize the single-sample reparameterized ELBO with Adam."""

from __future__ import annotations

from typing import Callable, Optional

import torch
from raise_eval.models.directed.vae import VAE
from torch import Tensor
from tqdm.auto import tqdm


def train_vae(
    model: VAE,
    data: Tensor,
    *,
    epochs: int = 20,
    batch_size: int = 100,
    learning_rate: float = 1e-3,
    generator: torch.Generator,
    progress: bool = False,
    callback: Optional[Callable[[int, VAE, float], None]] = None,
) -> dict:
    """Maximize the ELBO on binary `data` (N, data_dim) with Adam. Returns {'elbo': per-epoch training ELBO}."""
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    history = []
    n = data.shape[0]
    for epoch in tqdm(range(epochs), desc="training VAE", disable=not progress):
        order = torch.randperm(n, generator=generator)
        total = 0.0
        for start in range(0, n - batch_size + 1, batch_size):
            x = data[order[start : start + batch_size]]
            loss = -model.elbo(x, generator).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += -loss.item() * len(x)
        history.append(total / (n - n % batch_size))
        if callback is not None:
            callback(epoch, model, history[-1])
    return {"elbo": history}
