"""A VAE trained by plain PyTorch code (scripts/train_vae_plain.py), rebuilt and wrapped for raise-eval:
    raise-eval bdmc --model examples/plain_vae_factory.py:make_model"""
from pathlib import Path

import torch
from torch import nn

from raise_eval import DecoderModel

CHECKPOINT = Path(__file__).resolve().parents[1] / "checkpoints" / "plain_vae_mnist_z50.pt"


def mlp(*sizes):  # Linear layers with ELU between them, as the training code built them
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ELU()]
    return nn.Sequential(*layers[:-1])


def make_model():
    vae = nn.Module()
    vae.encoder, vae.decoder = mlp(784, 200, 200, 100), mlp(50, 200, 200, 784)
    vae.load_state_dict(torch.load(CHECKPOINT, map_location="cpu", weights_only=True))
    # decoder: z -> Bernoulli logits; encoder: x -> [mean | log-variance]
    return DecoderModel(
        vae.decoder, latent_dim=50, likelihood="bernoulli", encoder=vae.encoder, encoder_scale="log_var", data_dim=784
    )
