"""The MNIST energy that scripts/train_energy_mnist.py trains (an MLP 784-256-256-1 with SiLU on the box [0, 1]),
rebuilt and wrapped for raise-eval:
    raise-eval evaluate --model examples/energy_mnist_factory.py:make --data runs/energy_mnist/test.npy --threads 1
(the default base, nearly uniform on the box: the model's mass is mostly on noise-like images, which a base fitted to
the training images misses; docs/energy.md)
$ENERGY_MNIST_WEIGHTS names another state_dict file than runs/energy_mnist/energy.pt."""

import os
from pathlib import Path

import torch
from torch import nn

from raise_eval import EnergyModel

WEIGHTS = Path(__file__).resolve().parents[1] / "runs" / "energy_mnist" / "energy.pt"


class MLPEnergy(nn.Module):
    """x (N, 784) in [0, 1] -> E(x) (N,): an MLP 784-256-256-1 with SiLU (smooth, for HMC's gradients)."""

    def __init__(self, hidden: int = 256):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(784, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 1)
        )

    def forward(self, x):
        return self.net(x.flatten(start_dim=1)).squeeze(-1)


def make():
    energy = MLPEnergy()
    energy.load_state_dict(torch.load(os.environ.get("ENERGY_MNIST_WEIGHTS", WEIGHTS), weights_only=True))
    return EnergyModel(energy.eval(), support=("real", 0.0, 1.0), event_shape=(784,))
