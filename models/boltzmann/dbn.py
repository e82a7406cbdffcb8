"""Deep belief net (Hinton, Osindero & Teh, 2006): an RBM over the top two layers, sigmoid directed layers below.

Layers x_0 = v, x_1, ..., x_L (L >= 2); weights[l] shaped (n_l, n_{l+1}). The top RBM joins x_{L-1} and x_L
(weights[L-1], biases[L-1], biases[L]); below it each layer is generated from the one above,

    p(x_l = 1 | x_{l+1}) = sigmoid(weights[l] x_{l+1} + biases[l]),   l = 0 .. L-2,

so p(v) = f(v) / Z_top with f(v) = sum_{x_1..x_{L-1}} prod_{l<L-1} p(x_l | x_{l+1}) f_top(x_{L-1}), where
f_top(x_{L-1}) = sum_{x_L} exp(-E_top) is the top RBM's unnormalized marginal. The recognition distribution of the
greedy training, q(x_{l+1} = 1 | x_l) = sigmoid(x_l weights[l] + recognition_biases[l+1]), l = 0 .. L-2, proposes
the directed layers given v.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch
import torch.nn.functional as F
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine, as_parameter, random_chain_parameters
from raise_eval.models.boltzmann.rbm import RBM
from raise_eval.models.sampling import sample_bernoulli_logits
from torch import Tensor


def _bernoulli_log_prob(x: Tensor, logits: Tensor) -> Tensor:
    """sum_j log Bernoulli(x_j; sigmoid(logits_j)) over the last dimension, in float64."""
    x, logits = x.double(), logits.double()
    return (x * logits - F.softplus(logits)).sum(-1)


class DBN:
    """A deep belief net.

    Args:
        weights: L >= 2 weight matrices, weights[l] shaped (n_l, n_{l+1}).
        biases: L + 1 generative biases; biases[L-1] and biases[L] are the top RBM's.
        recognition_biases: L - 1 vectors, recognition_biases[i] for layer i + 1 (shaped (n_{i+1},)).
    """

    def __init__(self, weights: Sequence[Tensor], biases: Sequence[Tensor], recognition_biases: Sequence[Tensor]):
        weights, biases, recognition = tuple(weights), tuple(biases), tuple(recognition_biases)
        if len(weights) < 2:
            raise ValueError(
                f"a DBN has at least two hidden layers (two weight matrices); got {len(weights)} (use RBM)"
            )
        # The layered machine checks shapes, dtypes, devices and finiteness of every weight and bias.
        chain = LayeredBoltzmannMachine(weights, biases)
        if len(recognition) != len(weights) - 1:
            raise ValueError(
                f"a DBN with {len(weights)} weight matrices needs {len(weights) - 1} recognition bias vectors "
                f"(layers 1..{len(weights) - 1}), got {len(recognition)}"
            )
        biases = chain.biases  # numpy arrays converted (`as_parameter`)
        recognition = tuple(as_parameter(f"recognition_biases[{i}]", r) for i, r in enumerate(recognition))
        for i, r in enumerate(recognition):
            ref = biases[i + 1]
            if not isinstance(r, Tensor) or r.shape != ref.shape or r.dtype != ref.dtype or r.device != ref.device:
                raise ValueError(
                    f"recognition_biases[{i}] (layer {i + 1}) must be a {ref.dtype} vector of {ref.shape[0]} "
                    f"entries on {ref.device}, like biases[{i + 1}]"
                )
            if not bool(torch.isfinite(r).all()):
                raise ValueError(f"recognition_biases[{i}] has NaN or infinite entries")
        self._chain = chain  # the layer structure; the energy of a DBN is not the chain's
        self.weights = chain.weights
        self.biases = chain.biases
        self.recognition_biases = recognition
        self.top = RBM(chain.weights[-1], biases[-2], biases[-1])

    @classmethod
    def random(
        cls,
        layer_sizes: Sequence[int],
        *,
        weight_std: float = 1.0,
        bias_std: float = 1.0,
        generator: torch.Generator,
        dtype: torch.dtype = torch.float32,
        device=None,
    ) -> DBN:
        """A DBN with Gaussian random parameters (for tests and examples)."""
        weights, biases = random_chain_parameters(
            layer_sizes, weight_std=weight_std, bias_std=bias_std, generator=generator, dtype=dtype, device=device
        )
        recognition = [
            torch.randn(n, generator=generator, dtype=dtype, device=device) * bias_std for n in list(layer_sizes)[1:-1]
        ]
        return cls(weights, biases, recognition)

    # ----------------------------------------------------------------- structure (the chain's)
    family = "DBN"
    typed_layers = False  # binary layers (its top RBM's path is the binary one)

    def describe(self) -> str:
        """E.g. 'DBN 784-500-2000'."""
        return f"DBN {'-'.join(map(str, self.layer_sizes))}"

    def digest_parts(self) -> tuple[list[Tensor], float]:
        """The weights, biases and recognition biases, and weight scale 1 (a resume file's model digest)."""
        return [*self.weights, *self.biases, *self.recognition_biases], 1.0

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        return self._chain.layer_sizes

    @property
    def num_layers(self) -> int:
        return self._chain.num_layers

    @property
    def n_visible(self) -> int:
        return self._chain.n_visible

    @property
    def dtype(self) -> torch.dtype:
        return self._chain.dtype

    @property
    def device(self) -> torch.device:
        return self._chain.device

    def to(self, device=None, dtype=None) -> DBN:
        def move(ts):
            return [t.to(device=device, dtype=dtype) for t in ts]

        return DBN(move(self.weights), move(self.biases), move(self.recognition_biases))

    # ----------------------------------------------------------------- directed part
    def generative_logits(self, above: Tensor, l: int) -> Tensor:
        """Logits of p(x_l | x_{l+1} = above), shaped (*batch, n_l), for l = 0 .. L-2."""
        return torch.matmul(above, self.weights[l].t()) + self.biases[l]

    def recognition_logits(self, below: Tensor, l: int) -> Tensor:
        """Logits of q(x_{l+1} | x_l = below), shaped (*batch, n_{l+1}), for l = 0 .. L-2."""
        return torch.matmul(below, self.weights[l]) + self.recognition_biases[l]

    def log_directed_likelihood(self, layers: Sequence[Tensor]) -> Tensor:
        """sum_{l=0}^{L-2} log p(x_l | x_{l+1}) in float64, shaped (*batch,), for layers [x_0, ..., x_{L-1}]."""
        return sum(
            _bernoulli_log_prob(layers[l], self.generative_logits(layers[l + 1], l))
            for l in range(len(self.weights) - 1)
        )

    def sample_recognition(
        self, v: Tensor, generator: torch.Generator, num_samples: Optional[int] = None
    ) -> tuple[list[Tensor], Tensor]:
        """Sample x_1 .. x_{L-1} from q(. | v) layer by layer.

        Args:
            v: visible vectors shaped (*batch, n_visible).
            num_samples: when given, draw that many samples per vector: the layers are then shaped
                (*batch, num_samples, n_l), and the first layer's logits are computed once per vector.
        Returns:
            ([v, x_1, ..., x_{L-1}] in the model's dtype, log q(x_1..x_{L-1} | v) in float64 shaped like the
            samples' batch).
        """
        v = v.to(dtype=self.dtype)
        logits = self.recognition_logits(v, 0)
        if num_samples is not None:
            v = v.unsqueeze(-2).expand(*v.shape[:-1], num_samples, v.shape[-1])
            logits = logits.unsqueeze(-2).expand(*logits.shape[:-1], num_samples, logits.shape[-1])
        layers = [v]
        log_q = torch.zeros(v.shape[:-1], dtype=torch.float64, device=v.device)
        for l in range(len(self.weights) - 1):
            if l > 0:
                logits = self.recognition_logits(layers[-1], l)
            x = sample_bernoulli_logits(logits, generator)
            log_q = log_q + _bernoulli_log_prob(x, logits)
            layers.append(x)
        return layers, log_q

    def log_unnormalized_joint_visible(self, layers: Sequence[Tensor]) -> Tensor:
        """log [prod_{l<L-1} p(x_l | x_{l+1}) f_top(x_{L-1})] in float64, shaped (*batch,), for layers
        [x_0, ..., x_{L-1}] (the top layer x_L summed out)."""
        return self.log_directed_likelihood(layers) + self.top.log_unnormalized_prob(layers[-1]).double()

    def __repr__(self) -> str:
        sizes = "-".join(str(n) for n in self.layer_sizes)
        return f"DBN({sizes}, {self.dtype}, {self.device})"
