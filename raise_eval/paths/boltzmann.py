"""The geometric path from an independent base distribution to a layered Boltzmann machine.

f_beta(x) = f_base(x)^(1 - beta) f(x)^beta with f_base(x) = exp(sum_l c_l . x_l): the chain with weights beta W
and biases (1 - beta) c + beta b. The state space is the even layers (odd layers summed out), so for an RBM it is
the visible vector, and the path's densities are the exact marginals f_beta(v) = sum_h f_beta(v, h).

Base distributions: `uniform_base` (c = 0) and `data_base_rates` (visible biases = logit of the clipped training-set
pixel means, every hidden unit uniform), the two initial distributions of the RAISE paper.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from raise_eval.kernels.binary_program import BinaryGibbsProgram
from raise_eval.kernels.block_gibbs import BoltzmannState, block_gibbs_step, collapse_odd_layers
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine
from raise_eval.paths.energy import energy_path
from raise_eval.paths.fully_visible import fully_visible_path
from raise_eval.paths.geometric import GeometricBoltzmannPath
from raise_eval.paths.mixed import MixedPath


def uniform_base(model: LayeredBoltzmannMachine) -> list[Tensor]:
    """Base biases of the uniform distribution over every layer (all zeros)."""
    return [torch.zeros_like(b) for b in model.biases]


def data_base_rates(model: LayeredBoltzmannMachine, train_data: Tensor, eps: float = 1e-3) -> list[Tensor]:
    """Base biases of the data-base-rate distribution (Salakhutdinov & Murray, 2008).

    Visible biases are logit(clip(mean of train_data, eps, 1 - eps)); hidden layers are uniform.

    Args:
        train_data: binary training vectors shaped (N, n_visible).
        eps: clipping of the pixel means, so that pixels never on (or always on) get finite biases.
    """
    if train_data.dim() != 2 or train_data.shape[1] != model.n_visible:
        raise ValueError(f"base rates need training data shaped (N, {model.n_visible}), got {tuple(train_data.shape)}")
    if train_data.shape[0] == 0:
        raise ValueError("base rates need at least one training vector")
    if not 0 < eps < 0.5:
        raise ValueError(f"eps must be in (0, 0.5), got {eps}")
    mean = train_data.double().mean(0).clamp(eps, 1 - eps)
    visible = torch.log(mean) - torch.log1p(-mean)
    return [visible.to(model.dtype).to(model.device)] + [torch.zeros_like(b) for b in model.biases[1:]]


class BoltzmannPath(GeometricBoltzmannPath):
    """Geometric path from an independent base (beta = 0) to `model` (beta = 1) on the even layers, for binary
    layers (`paths.geometric` has what every Boltzmann path shares; this class the binary base and weight update).
    `BoltzmannPath(model)` serves every Boltzmann machine: a machine of typed layers (it declares `typed_layers`)
    gets a `MixedPath`.

    Args:
        model: the target Boltzmann machine.
        base_biases: one bias vector per layer for the independent base distribution; uniform when None.
        clamped: even layers the kernel leaves unchanged (e.g. (0,) to anneal p_beta(hidden | v) while heating a
            DBM's hidden layers); the densities are unchanged.
    """

    def __new__(cls, model, *args, **kwargs):
        if cls is BoltzmannPath and model.typed_layers:  # declared by the model (`models.contracts`)
            return MixedPath(model, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        model: LayeredBoltzmannMachine,
        base_biases: Optional[Sequence[Tensor]] = None,
        clamped: Collection[int] = (),
    ):
        super().__init__(model, base_biases, clamped)

    @staticmethod
    def _default_base(model) -> list[Tensor]:
        return uniform_base(model)

    def _check_base(self, model, base: list) -> None:
        if len(base) != model.num_layers:
            raise ValueError(f"need {model.num_layers} base bias vectors, got {len(base)}")
        for l, (c, b) in enumerate(zip(base, model.biases)):
            if c.shape != b.shape:
                raise ValueError(f"base bias {l} has shape {tuple(c.shape)}, the model's has {tuple(b.shape)}")
            if not bool(torch.isfinite(c).all()):
                raise ValueError(f"base bias {l} has NaN or infinite entries")

    def _prepare(self) -> None:
        model = self.model
        # d(logit)/d(beta) of a summed-out unit is s u_j + b_j - c_j, with |u_j| <= sum of |weights| into unit j
        # (binary neighbours): a host-side bound on how far a step moves the logits, computed once.
        self._logit_speed = [None] * model.num_layers
        for l in range(1, model.num_layers, 2):
            fan_in = model.weights[l - 1].abs().sum(0)
            if l + 1 < model.num_layers:
                fan_in = fan_in + model.weights[l].abs().sum(1)
            speed = abs(model.weight_scale) * fan_in.max() + (model.biases[l] - self.base_biases[l]).abs().max()
            self._logit_speed[l] = float(speed)

    @property
    def log_partition_initial(self) -> float:
        """log Z_0 of the base: every unit independent, sum of softplus(c), in float64."""
        return float(sum(F.softplus(c.double()).sum() for c in self.base_biases))

    def _collapse(self, layers: list) -> BoltzmannState:
        return collapse_odd_layers(self.model, layers)

    def sample_base_layer(self, l: int, batch_shape: tuple, generator: torch.Generator) -> Tensor:
        """Exact samples of layer `l` under the base p_0 (its units are independent), shaped (*batch_shape, n_l)."""
        c = self.base_biases[l]
        u = torch.rand((*batch_shape, c.shape[0]), generator=generator, device=c.device, dtype=c.dtype)
        return (u < torch.sigmoid(c)).to(c.dtype)

    def log_base_prob(self, x: Tensor, l: int) -> Tensor:
        """log p_0(x_l) of layer `l` under the base (independent units), float64, shaped (*batch,)."""
        c = self.base_biases[l].double()
        return torch.mv(x.double().reshape(-1, c.shape[0]), c).reshape(x.shape[:-1]) - float(F.softplus(c).sum())

    def _log_ratio(self, state: BoltzmannState, beta_from: float, beta_to: float, keep_probs: Optional[str]):
        odd = [l for l, inp in enumerate(state.odd_inputs) if inp is not None]
        step = abs(beta_to - beta_from)
        bounds = [None if speed is None else step * speed for speed in self._logit_speed]
        small = [bound is not None and bound <= 2.0 for bound in bounds]
        keep = keep_probs is not None and all(small[l] for l in odd)
        buffers, probs = [], [None] * self.model.num_layers
        for l in odd:
            inp = state.odd_inputs[l]
            if keep and keep_probs == "own" and state.odd_probs is not None:
                probs[l] = state.odd_probs[l]
            elif keep:
                probs[l] = torch.empty_like(inp)
            else:
                probs[l] = self._buffers.like(f"ratio_to{l}", inp.shape, inp)
            buffers += [
                probs[l],
                self._buffers.like(f"ratio_from{l}", inp.shape, inp),
                self._buffers.like(f"ratio_float64_{l}", inp.shape, inp, dtype=torch.float64),
                self._buffers.like(f"ratio_series{l}", inp.shape, inp),
            ]
        ratio = self.at(beta_from).log_ratio_to(
            self.at(beta_to), state.layers, state.odd_inputs, buffers=buffers, small_steps=small, step_bounds=bounds
        )
        # With the small-step form the first buffer of each odd layer now holds p(x_l = 1 | x_even) at beta_to:
        # exactly what a transition at beta_to from this state samples first (the annealing loop's next step).
        if keep:
            return ratio, state._replace(odd_probs=tuple(probs), probs_key=self.probs_key(beta_to, state))
        return ratio, state._replace(probs_key=None)

    def step_program(self, options):
        """The block Gibbs step and weight update as a `kernels.binary_program.BinaryGibbsProgram` where `options`
        run step programs on the model's device (CUDA by default), else None."""
        if not options.runs_on(self.model.device):
            return None
        return BinaryGibbsProgram(self, products=options.products, fuse=options.fuse)

    def _gibbs(self, at, state, generator, clamped, out, odd_probs) -> BoltzmannState:
        return block_gibbs_step(
            at, state, generator, clamped=clamped, scratch=self._buffers, out=out, odd_probs=odd_probs
        )


# The path of each family that is not a chain of layers, by the family the model declares.
_PATHS_BY_FAMILY = {"fully-visible": fully_visible_path, "energy": energy_path}


def make_path(model, base_biases: Optional[Sequence[Tensor]] = None, clamped: Collection[int] = ()):
    """The geometric path of a model, by the family it declares: `FullyVisiblePath` for 'fully-visible' (base_biases:
    its base's fields), `EnergyPath` for 'energy' (base_biases: its base object), else a Boltzmann machine's:
    `MixedPath` for typed layers, `BoltzmannPath` for binary ones (as the model declares: `typed_layers`)."""
    build = _PATHS_BY_FAMILY.get(model.family)
    if build is not None:
        return build(model, base_biases, clamped)
    return BoltzmannPath(model, base_biases, clamped)
