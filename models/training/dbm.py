"""Training deep Boltzmann machines (Salakhutdinov & Hinton, 2009; Salakhutdinov & Larochelle, 2010).

Layers x_0 = v, x_1, ..., x_L (L >= 2 hidden layers), weights W_l shaped (n_l, n_{l+1}).

1. Greedy pretraining, one modified RBM per weight matrix. RBM l joins x_l and x_{l+1} with one matrix W_l, used
   bottom-up as up_l * W_l and top-down as down_l * W_l:

       p(x_{l+1} = 1 | x_l) = sigmoid(up_l * x_l W_l + c_l),
       p(x_l = 1 | x_{l+1}) = sigmoid(down_l * W_l x_{l+1} + b_l)

   with up_l = 2 when x_{l+1} is not the top layer and down_l = 2 when x_l is not the visible layer, else 1. In
   the DBM every hidden unit below the top gets input from both neighbours; the doubled direction stands in for
   the neighbour the RBM does not have. So the bottom RBM (l = 0) has its visible input doubled (2 W_0 bottom-up,
   W_0 top-down), the top RBM (l = L-1) its hidden input doubled (W bottom-up, 2 W top-down), and a middle RBM is
   doubled both ways, i.e. an ordinary RBM with weights 2 W_l. CD-k or PCD as in `train_rbm` (same initialization,
   momentum, weight decay and linear learning-rate decay); the data of RBM l + 1 are the probabilities
   sigmoid(up_l * x_l W_l + c_l) of RBM l's hidden units.

2. Composition, exactly: the DBM's weight l is W_l as trained, i.e. the doubled directions are halved (a middle
   RBM, an ordinary RBM with weights 2 W_l, contributes half of them; the bottom and top RBMs contribute the
   weights they use in their undoubled direction). Biases: b_0 = RBM 0's visible bias, b_L = RBM L-1's hidden
   bias, and for 0 < l < L the average of RBM l-1's hidden bias and RBM l's visible bias (both describe x_l;
   the average makes the DBM's marginal of x_l the geometric mean of the two RBMs' marginals, the argument of the
   2009 paper; Salakhutdinov's released code adds the two instead).

3. Joint training by stochastic approximation: the data term from the mean-field posterior (bottom-up
   initialization with doubled inputs below the top, then `mean_field_iterations` sweeps of odd then even layers,
   as `DBM.mean_field`), the model term from `num_chains` persistent Markov chains advanced by `gibbs_steps`
   block-Gibbs sweeps per update (odd layers given even ones, then even ones given odd ones; the statistics use
   the odd layers' conditional probabilities given the sampled even layers). Minibatch SGD with momentum, L2
   weight decay on the weights and a learning rate decaying linearly to `final_learning_rate_fraction` of itself.

4. Centering (optional, `centering=True`; Montavon & Mueller, 2012; Melchior, Fischer & Wiskott, 2016). The
   same model family written around offsets o_l (running means of the data-phase marginals):

       -E(x) = sum_l (x_l - o_l)^T W_l (x_{l+1} - o_{l+1}) + sum_l a_l^T (x_l - o_l),

   so the plain biases are b_l = a_l - W_l o_{l+1} - W_{l-1}^T o_{l-1} (plus a constant). Gradient steps are taken
   in (W, a): the weight gradient is the difference of *centered* second moments, and a step (dW, da) is the
   plain step db_l = da_l - dW_l o_{l+1} - dW_{l-1}^T o_{l-1}. The weights' gradient then no longer mixes in the
   units' mean activities, which conditions the problem far better (a DBM's layers no longer fight over the
   biases), and the model stays a plain DBM: evaluation needs nothing new. The offsets move by an exponential
   average with rate `offset_rate` (the plain parameters, hence the model, do not change when they move).

Every random draw takes the `torch.Generator` passed in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from raise_eval.models.boltzmann.dbm import DBM
from raise_eval.models.boltzmann.layered import LayeredBoltzmannMachine
from raise_eval.models.boltzmann.rbm import RBM
from raise_eval.models.sampling import sample_bernoulli_logits
from raise_eval.models.training.dbn import check_budget_seconds, layer_deadlines
from raise_eval.models.training.rbm import RBMTrainingConfig, _check_finite
from raise_eval.models.training.rbm import train_scaled_rbm as train_doubled_rbm
from torch import Tensor
from tqdm.auto import tqdm


@dataclass
class DBMTrainingConfig:
    """Hyperparameters of `train_dbm`: `hidden` sizes (at least two), `pretrain_*` for the greedy RBMs (their
    momentum settings are shared with joint training), the rest for joint training.

    `pretrain_budget_fraction` is the share of a wall-clock budget (`max_seconds`) that pretraining may use; joint
    training gets the rest. The joint-training defaults follow Salakhutdinov's code (learning rate 0.001, momentum
    0.9, weight decay 2e-4, 300 epochs, 100 chains, 5 Gibbs sweeps); with momentum m the step is about
    learning_rate / (1 - m), and on MNIST 784-500-1000 a learning rate of 0.01 at momentum 0.9 broke training down.
    """

    hidden: list[int] = field(default_factory=lambda: [500, 1000])
    pretrain_epochs: int = 100
    pretrain_batch_size: int = 100
    pretrain_learning_rate: float = 0.05
    pretrain_final_learning_rate_fraction: float = 0.1
    pretrain_weight_decay: float = 1e-4
    pretrain_method: str = "cd"
    pretrain_gibbs_steps: int = 1
    init_weight_std: float = 0.01
    epochs: int = 300
    batch_size: int = 100
    learning_rate: float = 0.001
    final_learning_rate_fraction: float = 0.1
    initial_momentum: float = 0.5
    momentum: float = 0.9
    momentum_switch_epoch: int = 5
    weight_decay: float = 2e-4
    mean_field_iterations: int = 10
    num_chains: int = 100
    gibbs_steps: int = 5
    pretrain_budget_fraction: float = 0.3
    centering: bool = False
    offset_rate: float = 0.01

    def pretrain_config(self, n_hidden: int) -> RBMTrainingConfig:
        return RBMTrainingConfig(
            n_hidden=n_hidden,
            epochs=self.pretrain_epochs,
            batch_size=self.pretrain_batch_size,
            learning_rate=self.pretrain_learning_rate,
            final_learning_rate_fraction=self.pretrain_final_learning_rate_fraction,
            initial_momentum=self.initial_momentum,
            momentum=self.momentum,
            momentum_switch_epoch=self.momentum_switch_epoch,
            weight_decay=self.pretrain_weight_decay,
            method=self.pretrain_method,
            gibbs_steps=self.pretrain_gibbs_steps,
            init_weight_std=self.init_weight_std,
        )


def pretrain_dbm(
    data: Tensor,
    config: DBMTrainingConfig,
    *,
    generator: torch.Generator,
    progress: bool = False,
    max_seconds: Optional[float] = None,
    report: Optional[dict[str, Any]] = None,
) -> DBM:
    """Greedy layer-wise pretraining and composition (steps 1 and 2 of the module docstring); returns the DBM.

    `max_seconds` is split between the RBMs in proportion to their weight counts."""
    if len(config.hidden) < 2:
        raise ValueError(f"a DBM has at least two hidden layers; got hidden={config.hidden}")
    check_budget_seconds(max_seconds)
    sizes = [data.shape[1], *config.hidden]
    L = len(config.hidden)
    start = time.monotonic()
    deadlines = layer_deadlines(start, max_seconds, [a * b for a, b in zip(sizes[:-1], sizes[1:])])
    rbms, layer_reports = [], []
    x = data
    for l in range(L):
        up = 2.0 if l + 1 < L else 1.0
        down = 2.0 if l > 0 else 1.0
        rbm, info = train_doubled_rbm(
            x,
            config.pretrain_config(sizes[l + 1]),
            up,
            down,
            generator=generator,
            progress=progress,
            deadline=deadlines[l],
            desc=f"pretraining RBM {l + 1}/{L} ({sizes[l]}-{sizes[l + 1]})",
        )
        rbms.append(rbm)
        layer_reports.append({"layer": l + 1, "sizes": [sizes[l], sizes[l + 1]], **info})
        if l + 1 < L:
            x = RBM._trusted([rbm.W], [rbm.vbias, rbm.hbias], up).hidden_probs(x)
    if report is not None:
        report.update(layers=layer_reports, seconds=time.monotonic() - start)
    return dbm_from_pretrained(rbms)


def dbm_from_pretrained(rbms: list[RBM]) -> DBM:
    """Compose pretrained (doubled) RBMs into a DBM (step 2 of the module docstring)."""
    weights = [r.W for r in rbms]
    biases = [rbms[0].vbias]
    biases += [(below.hbias + above.vbias) / 2 for below, above in zip(rbms[:-1], rbms[1:])]
    biases.append(rbms[-1].hbias)
    return DBM(weights, biases)


def mean_field_fixed(model: LayeredBoltzmannMachine, v: Tensor, iterations: int) -> list[Tensor]:
    """Mean-field marginals [v, mu_1, ..., mu_L] in the model's dtype after a fixed number of sweeps (the
    initialization and the sweep order of `DBM.mean_field`)."""
    mu = [v]
    L = model.num_layers - 1
    for l in range(1, L + 1):
        factor = 2.0 if l < L else 1.0
        mu.append(torch.sigmoid(torch.addmm(model.biases[l], mu[l - 1], model.weights[l - 1], alpha=factor)))
    for _ in range(iterations):
        for parity in (1, 0):
            for l in range(1, L + 1):
                if l % 2 == parity:
                    mu[l] = model.layer_probs(mu, l)
    return mu


def centered_gradients(
    data_layers: list[Tensor], model_layers: list[Tensor], weights: list[Tensor], offsets: list[Tensor],
    weight_decay: float,
) -> list[Tensor]:
    """The centered gradient (step 4 of the module docstring) expressed in the plain parameters: the weight
    gradients [dW_0, ..., dW_{L-1}] followed by the bias gradients [db_0, ..., db_L].

    `data_layers` and `model_layers` are the data- and model-phase layers [x_0, ..., x_L], each (batch, n_l);
    `offsets` [o_0, ..., o_L], each (n_l,)."""
    centered_data = [x - o for x, o in zip(data_layers, offsets)]
    centered_model = [x - o for x, o in zip(model_layers, offsets)]
    grad_w = [
        d.t() @ d_next / len(d) - m.t() @ m_next / len(m) - weight_decay * w
        for d, d_next, m, m_next, w in zip(
            centered_data, centered_data[1:], centered_model, centered_model[1:], weights
        )
    ]
    grad_b = []
    for l, (d, m) in enumerate(zip(data_layers, model_layers)):
        g = d.mean(0) - m.mean(0)
        if l < len(weights):
            g = g - grad_w[l] @ offsets[l + 1]
        if l > 0:
            g = g - offsets[l - 1] @ grad_w[l - 1]
        grad_b.append(g)
    return grad_w + grad_b


def gibbs_sweep(model: LayeredBoltzmannMachine, layers: list[Tensor], generator: torch.Generator) -> None:
    """One block-Gibbs sweep in place: the odd layers given the even ones, then the even ones (v included)."""
    for parity in (1, 0):
        for l in range(parity, model.num_layers, 2):
            layers[l] = model.sample_layer(layers, l, generator)


def train_dbm_joint(
    data: Tensor,
    model: DBM,
    config: DBMTrainingConfig,
    *,
    generator: torch.Generator,
    progress: bool = False,
    deadline: Optional[float] = None,
    report: Optional[dict[str, Any]] = None,
    monitor_size: int = 200,
    callback: Optional[Callable[[int, DBM], None]] = None,
    snapshot: Optional[Callable[[int, DBM], None]] = None,
    snapshot_every: int = 0,
) -> DBM:
    """Joint training from `model` (step 3 of the module docstring); returns the trained DBM.

    Stops after the first minibatch that ends past `deadline` (time.monotonic()). `report`, if a dict, gets per
    epoch the reconstruction error (mean squared error per pixel of sigmoid(b_0 + W_0 mu_1) against v, averaged
    over the epoch's minibatches) and the mean-field bound on log f(v) of the first `monitor_size` vectors.
    `callback(epoch, dbm)` runs after each joint epoch (counting from 0) on a copy of the DBM, e.g. a
    `raise_eval.hooks.LikelihoodMonitor`. `snapshot(updates, dbm)` receives the joint training's trajectory: the
    starting DBM (0 updates), the DBM after every `snapshot_every` updates and after the last one (its tensors change
    afterwards: copy or save what you keep).
    """
    if snapshot_every < 0 or (snapshot is not None and snapshot_every < 1):
        raise ValueError(f"snapshot_every must be a positive number of updates with a snapshot, got {snapshot_every}")
    n = data.shape[0]
    dtype, device = data.dtype, data.device
    weights = [w.to(dtype=dtype, device=device).clone() for w in model.weights]
    biases = [b.to(dtype=dtype, device=device).clone() for b in model.biases]
    params = weights + biases
    velocity = [torch.zeros_like(p) for p in params]
    L = len(weights)
    current = LayeredBoltzmannMachine._trusted(weights, biases, 1.0)
    # Persistent chains: training vectors, hidden layers sampled bottom-up from the doubled-input initialization.
    chains = [data[torch.randint(0, n, (config.num_chains,), generator=generator, device=device)].clone()]
    for l in range(1, L + 1):
        logits = torch.addmm(biases[l], chains[l - 1], weights[l - 1], alpha=2.0 if l < L else 1.0)
        chains.append(sample_bernoulli_logits(logits, generator))
    if config.centering:
        if not 0 < config.offset_rate <= 1:
            raise ValueError(f"offset_rate must be in (0, 1]; got {config.offset_rate}")
        # Offsets start at the data-phase marginals of (up to) the first 1000 training vectors.
        offsets = [m.mean(0) for m in mean_field_fixed(current, data[:1000], config.mean_field_iterations)]
    batches = max(1, n // config.batch_size)
    total_updates = config.epochs * batches
    update, stopped = 0, False
    history: dict[str, list] = {"reconstruction_error": [], "mean_field_bound": [], "epoch_end_seconds": []}
    monitor = data[:monitor_size]
    if snapshot is not None:
        snapshot(0, DBM(weights, biases))
    start = time.monotonic()
    bar = tqdm(range(config.epochs), desc="joint DBM training", disable=not progress)
    for epoch in bar:
        order = torch.randperm(n, generator=generator, device=device)
        momentum = config.initial_momentum if epoch < config.momentum_switch_epoch else config.momentum
        error_sum = 0.0
        for b in range(batches):
            v = data[order[b * config.batch_size : (b + 1) * config.batch_size]]
            mu = mean_field_fixed(current, v, config.mean_field_iterations)
            for _ in range(config.gibbs_steps):
                gibbs_sweep(current, chains, generator)
            neg = [current.layer_probs(chains, l) if l % 2 == 1 else x for l, x in enumerate(chains)]
            error_sum += float((current.layer_probs(mu, 0) - v).pow(2).mean())
            if config.centering:
                grads = centered_gradients(mu, neg, weights, offsets, config.weight_decay)
                for o, m in zip(offsets, mu):
                    o.lerp_(m.mean(0), config.offset_rate)
            else:
                grads = [
                    (mu[l].t() @ mu[l + 1]) / len(v) - (neg[l].t() @ neg[l + 1]) / len(neg[l])
                    - config.weight_decay * w
                    for l, w in enumerate(weights)
                ]
                grads += [m.mean(0) - x.mean(0) for m, x in zip(mu, neg)]
            lr = config.learning_rate * (1 - (1 - config.final_learning_rate_fraction) * update / total_updates)
            for p, vel, grad in zip(params, velocity, grads):
                vel.mul_(momentum).add_(grad, alpha=lr)
                p.add_(vel)
            update += 1
            if snapshot is not None and update % snapshot_every == 0:
                snapshot(update, DBM(weights, biases))
            if deadline is not None and time.monotonic() > deadline and update < total_updates:
                stopped = True
                break
        _check_finite("joint DBM training", params)
        history["reconstruction_error"].append(error_sum / (b + 1))
        bound = DBM(weights, biases).mean_field_bound(monitor).mean().item()
        history["mean_field_bound"].append(bound)
        history["epoch_end_seconds"].append(time.monotonic() - start)
        bar.set_postfix(recon=f"{history['reconstruction_error'][-1]:.4f}", bound=f"{bound:.1f}")
        if callback is not None:
            callback(epoch, DBM([w.clone() for w in weights], [b.clone() for b in biases]))
        if stopped:
            break
    if snapshot is not None and update % snapshot_every != 0:
        snapshot(update, DBM(weights, biases))  # the last parameters, when no multiple of snapshot_every
    if report is not None:
        report.update(
            epochs_completed=update / batches,
            epochs_planned=config.epochs,
            stopped_by_budget=stopped,
            seconds=time.monotonic() - start,
            **history,
        )
    return DBM([w.clone() for w in weights], [b.clone() for b in biases])


def train_dbm(
    data: Tensor,
    config: DBMTrainingConfig,
    *,
    generator: torch.Generator,
    progress: bool = False,
    max_seconds: Optional[float] = None,
    report: Optional[dict[str, Any]] = None,
    callback: Optional[Callable[[int, DBM], None]] = None,
    snapshot: Optional[Callable[[int, DBM], None]] = None,
    snapshot_every: int = 0,
) -> DBM:
    """Pretrain, compose and jointly train a DBM on binary `data` (N, n_visible); the module docstring has the
    procedure. `max_seconds` is a wall-clock budget for all of it: pretraining may use
    `config.pretrain_budget_fraction` of it, joint training what is left. `report`, if a dict, gets "pretraining"
    and "joint" entries (epochs, times, training statistics, whether the budget stopped each phase). `callback` runs
    after each joint epoch, `snapshot` on the joint training's trajectory (see `train_dbm_joint`)."""
    check_budget_seconds(max_seconds)
    fraction = config.pretrain_budget_fraction
    if not 0.0 <= fraction <= 1.0:  # NaN fails too
        raise ValueError(f"pretrain_budget_fraction must be between 0 and 1 (a share of max_seconds), got {fraction!r}")
    start = time.monotonic()
    pre_report: dict[str, Any] = {}
    pre_seconds = None if max_seconds is None else max_seconds * fraction
    model = pretrain_dbm(
        data, config, generator=generator, progress=progress, max_seconds=pre_seconds, report=pre_report
    )
    joint_report: dict[str, Any] = {}
    if config.epochs > 0:
        deadline = None if max_seconds is None else start + max_seconds
        model = train_dbm_joint(
            data,
            model,
            config,
            generator=generator,
            progress=progress,
            deadline=deadline,
            report=joint_report,
            callback=callback,
            snapshot=snapshot,
            snapshot_every=snapshot_every,
        )
    if report is not None:
        report.update(
            pretraining=pre_report,
            joint=joint_report,
            budget_exhausted=any(r["stopped_by_budget"] for r in pre_report["layers"])
            or bool(joint_report.get("stopped_by_budget")),
            seconds=time.monotonic() - start,
        )
    return model
