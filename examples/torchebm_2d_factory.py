"""The 2-D energy that scripts/examples/torchebm_2d.py trains with torchebm's own recipe, rebuilt and wrapped for
raise-eval (torchebm itself is not needed here: its energy is a plain MLP):
    raise-eval evaluate --model examples/torchebm_2d_factory.py:make --data runs/torchebm_2d/test.npy \
        --train-data runs/torchebm_2d/train.npy --threads 1
$TORCHEBM_2D_WEIGHTS names another state_dict file than runs/torchebm_2d/energy.pt."""

import os
from pathlib import Path

import torch
from torch import nn

from raise_eval import EnergyModel

WEIGHTS = Path(__file__).resolve().parents[1] / "runs" / "torchebm_2d" / "energy.pt"


class MLPEnergy(nn.Module):  # torchebm's README energy, the same layers: x (N, 2) -> E(x) (N,)
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 128), nn.SiLU(), nn.Linear(128, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


def make():
    energy = MLPEnergy()
    energy.load_state_dict(torch.load(os.environ.get("TORCHEBM_2D_WEIGHTS", WEIGHTS), weights_only=True))
    return EnergyModel(energy.eval(), support="real", event_shape=(2,))
