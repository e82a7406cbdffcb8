"""Short training trajectories of tiny Boltzmann machines (every checkpoint exactly enumerable), for the tests of
the trajectory path, BAR and the protocol built on them."""

from __future__ import annotations

import torch
from raise_eval.models import DBM, RBM


def random_walk(sizes, *, checkpoints: int = 3, weight_step: float = 0.4, bias_step: float = 0.2, seed: int = 0):
    """`checkpoints` machines whose parameters drift as training's do: from weights of 0.01 and visible biases of
    0.5 (a training run's start), each checkpoint adds Gaussian steps to every weight and bias. An RBM for two
    layer sizes, a DBM for more; float64."""
    g = torch.Generator().manual_seed(seed)
    weights = [torch.randn(a, b, generator=g, dtype=torch.float64) * 0.01 for a, b in zip(sizes[:-1], sizes[1:])]
    biases = [torch.randn(n, generator=g, dtype=torch.float64) * (0.5 if l == 0 else 0.0) for l, n in enumerate(sizes)]
    out = []
    for _ in range(checkpoints):
        weights = [w + torch.randn(w.shape, generator=g, dtype=torch.float64) * weight_step for w in weights]
        biases = [b + torch.randn(b.shape, generator=g, dtype=torch.float64) * bias_step for b in biases]
        if len(sizes) == 2:
            out.append(RBM(weights[0].clone(), biases[0].clone(), biases[1].clone()))
        else:
            out.append(DBM([w.clone() for w in weights], [b.clone() for b in biases]))
    return out


def start_biases(model):
    """The start a training run's visible biases come from: the first checkpoint's visible biases, hidden units
    uniform."""
    return [model.biases[0].clone()] + [torch.zeros_like(b) for b in model.biases[1:]]


def typed_walk(kinds, *, checkpoints: int = 3, weight_step: float = 0.4, bias_step: float = 0.2, seed: int = 0):
    """`checkpoints` machines of typed layers (`tests.mixed_models.small_layer` of each kind: binary, spin,
    categorical (Potts) or Gaussian units) drifting as `random_walk`'s do, from weights of 0.01; a Gaussian layer's
    means drift, its precisions stay 1 (weights beside a Gaussian layer step at half the size, keeping the density
    normalizable). float64."""
    from raise_eval.models.boltzmann.mixed import MixedBoltzmannMachine

    from tests.mixed_models import small_layer

    g = torch.Generator().manual_seed(seed)
    layers = [small_layer(k, 1 if kinds.count("gaussian") > 1 else 2) for k in kinds]
    weights = [
        torch.randn(a.width, b.width, generator=g, dtype=torch.float64) * 0.01 for a, b in zip(layers[:-1], layers[1:])
    ]
    biases = [torch.zeros(layer.param_shape, dtype=torch.float64) for layer in layers]
    for layer, b in zip(layers, biases):
        if layer.kind == "gaussian":
            b[1] = 1.0
    scale = [0.5 if "gaussian" in (a.kind, b.kind) else 1.0 for a, b in zip(layers[:-1], layers[1:])]
    out = []
    for _ in range(checkpoints):
        weights = [w + torch.randn(w.shape, generator=g, dtype=torch.float64) * weight_step * s
                   for w, s in zip(weights, scale)]  # fmt: skip
        stepped = []
        for layer, b in zip(layers, biases):
            b = b.clone()
            if layer.kind == "gaussian":
                b[0] += torch.randn(layer.size, generator=g, dtype=torch.float64) * bias_step
            else:
                b += torch.randn(b.shape, generator=g, dtype=torch.float64) * bias_step
            stepped.append(b)
        biases = stepped
        out.append(MixedBoltzmannMachine(layers, [w.clone() for w in weights], [b.clone() for b in biases]))
    return out


def write_potts_run(tmp_path):
    """A folder of three .npz checkpoints of a categorical-visible RBM along `typed_walk` (steps 1, 10, 100), as rbms
    saves them, with test and training data as category codes: (folder, walk, test file, train file)."""
    import numpy as np
    from raise_eval.models.boltzmann.mixed import rbm_arrays

    folder = tmp_path / "potts"
    folder.mkdir()
    walk = typed_walk(("categorical", "bernoulli"), checkpoints=3, seed=1)
    for step, model in zip([1, 10, 100], walk):
        np.savez(folder / f"step_{step}.npz", **rbm_arrays(model))
    rng = np.random.default_rng(0)
    np.save(tmp_path / "test.npy", rng.integers(0, 3, size=(50, 2)))
    np.save(tmp_path / "train.npy", rng.integers(0, 3, size=(200, 2)))
    return folder, walk, tmp_path / "test.npy", tmp_path / "train.npy"
