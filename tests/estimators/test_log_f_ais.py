"""AIS estimates of log f(v) from q(h | v) to the posterior with v clamped (`raise_eval.paths.posterior`).

Unbiasedness is checked in probability space against the exact log f(v) (tests/statistics.py): for each test vector
the single-chain estimates f-hat_c = Z_0(v) w_c of 40,000 independent chains (the chains of one call) give
r_c = f-hat_c / f(v) and the assertion |mean(r) - 1| < 4 SE, SE = sd(r) / sqrt(40,000). For a correct estimator
a check fails with probability about 6e-5 under normality (two-sided 4 sigma; the ratios are bounded, since q
gives every configuration positive probability, but right-skewed, which makes a low mean somewhat likelier). There
are 96 such checks (3 models x 4 K x 2 dtypes x 4 test vectors), about 0.6% for the file under fresh seeds; the
seeds are fixed, so each run is deterministic. The models are chosen multimodal: for each, at least one test vector
has a posterior with two local modes (a configuration of the state beating all its single-unit flips), and the
importance weights (K = 1) have relative variances up to about 17 (DBM 6-4-5), 23 (DBM 5-3-4-3) and 18 (DBN 6-5-4),
computed exactly by enumeration when the models were chosen. K = 1, 2, 3 expose off-by-one errors in the schedule;
K = 20 many small steps.
"""

from __future__ import annotations

import math

import pytest
import torch
from raise_eval.models import DBM, DBN
from raise_eval.models.boltzmann.dbm import mean_field_logits

import raise_eval.estimators.unnormalized as unnormalized
from raise_eval import anneal, exact, native
from raise_eval.estimators.unnormalized import log_unnormalized_estimate
from raise_eval.paths.posterior import DBMPosteriorPath, DBNPosteriorPath, posterior_path, softplus_increment
from raise_eval.stats import summarize_log_weights
from tests.statistics import assert_counts_match, assert_unbiased

CHAINS = 40_000
KS = [1, 2, 3, 20]


def _dbm(sizes, seed):
    generator = torch.Generator().manual_seed(seed)
    return DBM.random(sizes, weight_std=1.5, bias_std=0.5, generator=generator, dtype=torch.float64)


MODELS = {
    "dbm-2-hidden": lambda: _dbm((6, 4, 5), 6),
    "dbm-3-hidden": lambda: _dbm((5, 3, 4, 3), 5),
    "dbn-2-hidden": lambda: DBN.random(
        (6, 5, 4), weight_std=1.5, bias_std=0.5, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    ),
}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return MODELS[request.param]()


def _test_vectors(n_visible):
    v = exact.binary_configurations(n_visible)
    return v[[0, 5, 2**n_visible - 3, 2**n_visible - 1]]


def _chain_estimates(model, v, k, chains, seed):
    """log of the single-chain estimates Z_0(v) w_c, shaped (N, chains), with the final state."""
    path = posterior_path(model)
    generator = torch.Generator().manual_seed(seed)
    state, log_z0 = path.start(v, chains, generator)
    final, log_w = anneal(path, state, torch.linspace(0, 1, k + 1, dtype=torch.float64), generator=generator)
    assert log_w.dtype == log_z0.dtype == torch.float64 and log_w.shape == (v.shape[0], chains)
    return log_w + log_z0.unsqueeze(-1), final


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("k", KS)
def test_ais_estimates_of_f_are_unbiased(model, k, dtype):
    v = _test_vectors(model.n_visible)
    log_f_hat, _ = _chain_estimates(model.to(dtype=dtype), v, k, CHAINS, seed=100 + k)
    assert_unbiased(log_f_hat, exact.log_unnormalized_visible(model, v))


def test_single_chain_estimates_through_the_estimator(model):
    """ais_chains=1 on repeated vectors: each row is one chain's estimate (stderr NaN), unbiased too."""
    v = _test_vectors(model.n_visible)
    draws = 10_000
    est = log_unnormalized_estimate(
        model, v.repeat_interleave(draws, 0), method="ais", ais_steps=3, ais_chains=1,
        generator=torch.Generator().manual_seed(7),
    )  # fmt: skip
    assert (est.method, est.num_samples, est.steps) == ("ais", 1, 3)
    assert bool(torch.isnan(est.stderr).all())
    assert_unbiased(est.log_unnormalized.reshape(4, draws), exact.log_unnormalized_visible(model, v), max_se=0.1)


def test_the_estimator_averages_the_chains(model):
    """log_unnormalized_estimate's 'ais' estimate is log mean_c exp(log Z_0 + log w_c) of the path's chains (same
    generator stream, same bits), with the delta-method standard error over the chains."""
    v = _test_vectors(model.n_visible)
    est = log_unnormalized_estimate(
        model, v, method="ais", ais_steps=5, ais_chains=64, generator=torch.Generator().manual_seed(9)
    )
    log_f_hat, _ = _chain_estimates(model, v, 5, 64, seed=9)
    summary = summarize_log_weights(log_f_hat)
    assert torch.equal(est.log_unnormalized, summary.estimate) and torch.equal(est.stderr, summary.stderr)
    assert (est.method, est.num_samples, est.steps) == ("ais", 64, 5)
    assert est.to_dict()["steps"] == 5 and est.to_dict()["method"] == "ais"


def test_one_step_is_importance_sampling(model):
    """K = 1: the final state is a draw of q (the beta = 0 kernel draws q afresh) and each estimate is exactly the
    importance weight f(v, h) / q(h | v), computed here from the model's own energy and q's logits."""
    v = _test_vectors(model.n_visible)
    log_f_hat, final = _chain_estimates(model, v, 1, 256, seed=11)
    vv = v.unsqueeze(1).expand(-1, 256, -1)
    if isinstance(model, DBN):
        logits = model.recognition_logits(v, 0).unsqueeze(1)
        x = final.hidden
        log_q = (x * logits - torch.nn.functional.softplus(logits)).sum(-1)
        log_joint = model.log_unnormalized_joint_visible([vv, x])
    else:
        logits = mean_field_logits(model.mean_field(v))
        layers = [vv] + [None] * (model.num_layers - 1)
        log_q = torch.zeros(v.shape[0], 256, dtype=torch.float64)
        for l in range(2, model.num_layers, 2):
            x = layers[l] = final.layers[l]
            lam = logits[l].unsqueeze(1)
            log_q = log_q + (x * lam - torch.nn.functional.softplus(lam)).sum(-1)
        log_joint = model.log_unnormalized_marginal(layers)
    torch.testing.assert_close(log_f_hat, log_joint - log_q, rtol=0, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_estimates_are_reproducible(model, dtype):
    """Same seed, same bits; another seed, other numbers. Both dtypes give float64 estimates near the truth."""
    m = model.to(dtype=dtype)
    v = _test_vectors(m.n_visible)

    def run(seed):
        return log_unnormalized_estimate(
            m, v, method="ais", ais_steps=20, ais_chains=500, generator=torch.Generator().manual_seed(seed)
        )

    a, b, c = run(1), run(1), run(2)
    assert torch.equal(a.log_unnormalized, b.log_unnormalized) and torch.equal(a.stderr, b.stderr)
    assert not torch.equal(a.log_unnormalized, c.log_unnormalized)
    assert a.log_unnormalized.dtype == torch.float64 and a.log_unnormalized.shape == (4,)
    error = a.log_unnormalized - exact.log_unnormalized_visible(model, v)
    assert float(error.abs().max()) < 0.1, error  # observed: a few hundredths at most


def test_continues_from_a_saved_chunk(monkeypatch):
    """The chunks of 'ais' are saved and continued like those of importance sampling: stopped after 2 of 4 chunks,
    the saved estimates and generator state give the numbers of an uninterrupted run."""
    model = MODELS["dbm-2-hidden"]()
    v = exact.binary_configurations(model.n_visible)[:16]
    chains = 8
    monkeypatch.setattr(unnormalized, "_CHUNK_ELEMENTS", 4 * chains * DBMPosteriorPath(model).state_elements())
    kwargs = dict(method="ais", ais_steps=4, ais_chains=chains)

    class Recorder:  # keeps what `log_unnormalized_estimate` saves after each chunk, with the generator's state
        def __init__(self, generator, saved=None):
            self.generator, self.saved, self.records = generator, saved, []

        def restore(self, phase, path):
            return self.saved

        def on_step(self, phase):
            return lambda step, state, build: self.records.append((step, build(), self.generator.get_state()))

    g = torch.Generator().manual_seed(3)
    recorder = Recorder(g)
    whole = log_unnormalized_estimate(model, v, generator=g, checkpoint=recorder, **kwargs)
    assert [r[0] for r in recorder.records] == [1, 2, 3, 4]
    step, stacked, generator_state = recorder.records[1]
    g2 = torch.Generator()
    g2.set_state(generator_state)
    resumed = log_unnormalized_estimate(
        model, v, generator=g2, checkpoint=Recorder(g2, {"step": step, "log_weights": stacked}), **kwargs
    )
    assert torch.equal(resumed.log_unnormalized, whole.log_unnormalized)
    assert torch.equal(resumed.stderr, whole.stderr)


def test_annealing_removes_the_bias_of_importance_sampling():
    """On an 8-6-8 DBM with strong weights (multimodal posteriors), with 10 samples per vector, the mean error of
    log f-hat over 1,024 vectors (every visible configuration 4 times) is smaller for AIS with K = 100 than for
    importance sampling: their paired difference is above 4 standard errors (observed 8.5 to 12.2 standard errors
    for 8 pairs of seeds: importance errs -0.12 to -0.15 nats on average, AIS -0.006 to +0.004)."""
    model = DBM.random(
        (8, 6, 8), weight_std=2.5, bias_std=0.5, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )
    v = exact.binary_configurations(8).repeat(4, 1)
    truth = exact.log_unnormalized_visible(model, v)
    ais = log_unnormalized_estimate(
        model, v, method="ais", ais_steps=100, ais_chains=10, generator=torch.Generator().manual_seed(10)
    )
    importance = log_unnormalized_estimate(model, v, num_samples=10, generator=torch.Generator().manual_seed(20))
    ais_error, importance_error = ais.log_unnormalized - truth, importance.log_unnormalized - truth
    gain = ais_error - importance_error
    se = float(gain.std()) / math.sqrt(gain.numel())
    assert float(gain.mean()) > 4 * se, (float(ais_error.mean()), float(importance_error.mean()), se)
    assert abs(float(ais_error.mean())) < abs(float(importance_error.mean()))


def test_rbms_stay_exact(tiny_rbm):
    v = exact.binary_configurations(8)[:10]
    est = log_unnormalized_estimate(tiny_rbm, v, method="ais", generator=torch.Generator())
    assert est.method == "exact"
    torch.testing.assert_close(est.log_unnormalized, tiny_rbm.log_unnormalized_prob(v))


DEEP_DBN = {
    "dbn-3-hidden": lambda: DBN.random(
        (5, 4, 3, 2), weight_std=1.25, bias_std=0.5, generator=torch.Generator().manual_seed(3), dtype=torch.float64
    ),  # chosen among 4 seeds for importance weights (K = 1) with standard errors below 0.025 at 100,000 chains
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("k", KS)
def test_ais_estimates_of_f_are_unbiased_for_deeper_dbns(k, dtype):
    """A DBN with three hidden layers: the path runs over x_1 and x_2 from the mean-field recognition base (x_3
    summed out); the single-chain estimates are unbiased for the exact f(v) (32 z-scores, about 2e-3 false alarms)."""
    model = DEEP_DBN["dbn-3-hidden"]()
    v = _test_vectors(model.n_visible)
    chains = 100_000 if k < 20 else CHAINS  # heavier tails of the importance weights at small K
    log_f_hat, _ = _chain_estimates(model.to(dtype=dtype), v, k, chains, seed=150 + k)
    assert_unbiased(log_f_hat, exact.log_unnormalized_visible(model, v))


@pytest.mark.parametrize("sweep", ["full", "bounded"])
@pytest.mark.parametrize("k", [3, 20])
def test_the_pytorch_sweeps_are_unbiased_too(k, sweep):
    """The tests above run the CPU's default sweep (the native kernel where it compiles); the PyTorch sweeps give
    unbiased estimates as well: the one computing every chain's logit (what a GPU runs) and the bounded one (what
    the CPU runs without a C compiler)."""
    model = MODELS["dbn-2-hidden"]()
    v = _test_vectors(model.n_visible)
    path = DBNPosteriorPath(model, sweep=sweep)
    g = torch.Generator().manual_seed(170 + k + (0 if sweep == "full" else 50))
    state, log_z0 = path.start(v, CHAINS, g)
    _, log_w = anneal(path, state, torch.linspace(0, 1, k + 1, dtype=torch.float64), generator=g)
    assert_unbiased(log_w + log_z0.unsqueeze(-1), exact.log_unnormalized_visible(model, v))


def _dbn_posterior_table(model, v: torch.Tensor, beta: float):
    """(log f_beta(h) for every configuration h = (x_1, ..., x_{L-1}) of a tiny DBN with v (n_0,) clamped, the
    configurations' layers (None, x_1, ..., x_{L-1}) shaped (1, 2^units, n_l)), written from the model's own
    densities, independently of the path's code: (1 - beta) sum_l x_l . rho_l + beta [sum_{l<L-1} log p(x_l |
    x_{l+1}) + x_{L-1} . b_{L-1}] + sum_k softplus((1 - beta) rho_L + beta t)."""
    sizes = model.layer_sizes
    units = sum(sizes[1:-1])
    configs = exact.binary_configurations(units).to(model.dtype)
    layers, begin = [None], 0
    for n in sizes[1:-1]:
        layers.append(configs[:, begin : begin + n].unsqueeze(0))
        begin += n
    rho = DBNPosteriorPath(model).base_logits(v.unsqueeze(0))
    vv = v.expand(configs.shape[0], -1).unsqueeze(0)
    L = len(model.weights)
    base = sum((layers[l] * rho[l]).sum(-1) for l in range(1, L))
    directed = model.log_directed_likelihood([vv] + layers[1:]) + (layers[-1] * model.biases[L - 1]).sum(-1)
    t = torch.matmul(layers[-1], model.weights[-1]) + model.biases[-1]
    top = torch.nn.functional.softplus(torch.lerp(rho[L], t, beta)).sum(-1)
    table = ((1 - beta) * base + beta * directed + top).double().squeeze(0)
    return table, layers


POSTERIOR_MODELS = {**{k: MODELS[k] for k in ["dbn-2-hidden"]}, **DEEP_DBN}


@pytest.mark.parametrize("name", list(POSTERIOR_MODELS))
def test_dbn_path_densities_match_the_models(name):
    """The path's log-density ratios between any two temperatures, and log Z_0, against the table written from
    the model (1e-10 in float64); at beta = 1 the table is log f(v, h)."""
    model = POSTERIOR_MODELS[name]()
    path = DBNPosteriorPath(model)
    v = _test_vectors(model.n_visible)[1]
    tables = {b: _dbn_posterior_table(model, v, b)[0] for b in (0.0, 0.3, 0.31, 1.0)}
    _, layers = _dbn_posterior_table(model, v, 0.0)
    state = path.state_from_layers(v.unsqueeze(0), layers)
    for b0, b1 in [(0.0, 0.3), (0.3, 0.31), (0.31, 1.0), (0.0, 1.0), (1.0, 0.3)]:
        got = path.log_density_ratio(state, b0, b1).squeeze(0)
        torch.testing.assert_close(got, tables[b1] - tables[b0], rtol=0, atol=1e-10)
    torch.testing.assert_close(path.base_log_partition(v.unsqueeze(0)).squeeze(0), torch.logsumexp(tables[0.0], 0))
    joint = model.log_unnormalized_joint_visible([v.expand(layers[1].shape[1], -1).unsqueeze(0)] + list(layers[1:]))
    torch.testing.assert_close(tables[1.0], joint.squeeze(0), rtol=0, atol=1e-10)


@pytest.mark.parametrize("sweep", ["bounded", "full", "native"])
@pytest.mark.parametrize("beta", [0.4, 1.0])
@pytest.mark.parametrize("name", list(POSTERIOR_MODELS))
def test_dbn_posterior_sweep_leaves_f_beta_invariant(name, beta, sweep):
    """200,000 exact draws of f_beta(h) (from the table written from the model), one sweep each: the configurations'
    counts fit f_beta (Pearson chi-square, false-alarm rate about 1e-4 per check, 12 checks), for each sweep: the
    bounded one, the one computing every logit in PyTorch, and the native kernel. Two test vectors, one of which
    makes the posterior multimodal."""
    _needs_native(sweep)
    model = POSTERIOR_MODELS[name]()
    path = DBNPosteriorPath(model, sweep=sweep)
    for i, v in enumerate(_test_vectors(model.n_visible)[[1, 2]]):
        table, layers = _dbn_posterior_table(model, v, beta)
        probs = torch.softmax(table, 0)
        g = torch.Generator().manual_seed(1000 + i + 10 * ["full", "bounded", "native"].index(sweep))
        draws = torch.multinomial(probs, 200_000, replacement=True, generator=g)
        start = [None] + [x[:, draws] for x in layers[1:]]
        state = path.transition(path.state_from_layers(v.unsqueeze(0), start), beta, g)
        codes = exact.configuration_index(torch.cat([x.squeeze(0) for x in state.layers[1:]], dim=-1))
        assert_counts_match(torch.bincount(codes, minlength=probs.numel()), probs)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10", None])
@pytest.mark.parametrize("name", ["ais_steps", "ais_chains"])
def test_bad_ais_settings_are_refused(name, bad):
    model = MODELS["dbm-2-hidden"]()
    with pytest.raises(ValueError, match=f"{name} must be an integer of at least 1"):
        log_unnormalized_estimate(
            model, torch.zeros(2, 6), method="ais", generator=torch.Generator(), **{name: bad}
        )


@pytest.mark.parametrize(
    "betas", [[0.0], [0.0, 0.5], [0.1, 1.0], [0.0, 0.6, 0.4, 1.0], [0.0, float("nan"), 1.0], [[0.0, 1.0]]]
)
def test_bad_schedules_are_refused(betas):
    model = MODELS["dbm-2-hidden"]()
    with pytest.raises(ValueError, match="betas"):
        log_unnormalized_estimate(model, torch.zeros(2, 6), method="ais", betas=torch.tensor(betas),
                                  generator=torch.Generator())  # fmt: skip


def test_a_given_schedule_replaces_the_linear_one():
    model = MODELS["dbm-2-hidden"]()
    v = _test_vectors(6)
    betas = torch.tensor([0.0, 0.2, 0.7, 1.0], dtype=torch.float64)
    given = log_unnormalized_estimate(
        model, v, method="ais", betas=betas, ais_chains=16, generator=torch.Generator().manual_seed(4)
    )
    path = DBMPosteriorPath(model)
    g = torch.Generator().manual_seed(4)
    state, log_z0 = path.start(v, 16, g)
    _, log_w = anneal(path, state, betas, generator=g)
    assert given.steps == 3
    assert torch.equal(given.log_unnormalized, summarize_log_weights(log_w + log_z0.unsqueeze(-1)).estimate)


def test_softplus_increment_is_accurate():
    """softplus(z + d) - softplus(z) against 50-digit arithmetic, for tiny to large steps and logits of either
    sign: relative error near float64's rounding (the plain difference loses most digits for tiny d)."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    zs = [-700.0, -40.0, -10.0, -3.0, -1e-3, 0.0, 2.5, 35.0, 600.0]
    ds = [1e-12, -1e-9, 1e-4, -0.3, 2.0, -29.0, 31.0, -80.0]
    z = torch.tensor([a for a in zs for _ in ds], dtype=torch.float64)
    d = torch.tensor([b for _ in zs for b in ds], dtype=torch.float64)
    got = softplus_increment(z, z + d)

    def softplus(x):
        return mpmath.log1p(mpmath.exp(x))

    for zi, di, gi in zip(z.tolist(), d.tolist(), got.tolist()):
        want = softplus(mpmath.mpf(zi + di)) - softplus(mpmath.mpf(zi))  # z + d as rounded in float64
        assert abs(gi - float(want)) <= 1e-13 * abs(float(want)) + 1e-300, (zi, di, gi, float(want))


def _needs_native(sweep: str) -> None:
    """Skips a test of the native sweep where no C compiler works (the CI machine and the project's have one)."""
    if sweep == "native" and native.library() is None:
        pytest.skip(f"the native sweep is unavailable: {native.unavailable_reason()}")


def _sweep_mismatches(model, v, chains: int, betas, seed: int, sweep: str = "bounded") -> tuple[int, int]:
    """(draws, draws that differ from 1{threshold < exact logit}) of the sweeps (`sweep`: bounded or native, which
    draw their thresholds alike) of every directed hidden layer x_l, replayed in float64: each unit's logit is
    recomputed from the model's softplus terms of the layer below, with x_l as the sweep left it so far, and
    compared with the sweep's own thresholds (regenerated from the generator's state before the sweep). Draws whose
    threshold is within 1e-4 of the exact logit are not counted (the sweeps compute in the model's dtype)."""
    path = DBNPosteriorPath(model, sweep=sweep)
    g = torch.Generator().manual_seed(seed)
    state, _ = path.start(v, chains, g)
    state = path.clone_state(state)
    seen = {}
    sweep = path._sweep_

    def recording_sweep(l, x, linear, a, p_on, p_off, beta, generator):
        seen[l] = dict(x=x.clone(), linear=linear.clone(), generator=generator.get_state())
        sweep(l, x, linear, a, p_on, p_off, beta, generator)
        seen[l]["after"] = x.clone()

    path._sweep_ = recording_sweep
    draws = wrong = 0
    for beta in betas:
        path.transition_(state, beta, g)
        for l, record in seen.items():
            w, b = model.weights[l - 1].double(), model.biases[l - 1].double()
            x = record["x"].reshape(-1, model.layer_sizes[l]).double()
            after = record["after"].reshape(x.shape).double()
            linear = record["linear"].reshape(x.shape).double()
            replay = torch.Generator()
            replay.set_state(record["generator"])
            levels = torch.logit(torch.rand(x.shape, generator=replay, dtype=torch.float64))
            for j in range(x.shape[1]):
                a = x @ w.t() + b
                s = 1.0 - 2.0 * x[:, j : j + 1]
                terms = torch.nn.functional.softplus(a + s * w[:, j]) - torch.nn.functional.softplus(a)
                logit = linear[:, j] - beta * s.squeeze(1) * terms.sum(1)
                counted = (levels[:, j] - logit).abs() >= 1e-4
                wrong += int(((levels[:, j] < logit).double() != after[:, j])[counted].sum())
                draws += int(counted.sum())
                x[:, j] = after[:, j]
        seen.clear()
    return draws, wrong


@pytest.mark.parametrize("sweep", ["bounded", "native"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("sizes", [(60, 40, 30), (60, 40, 30, 20)], ids=["2-hidden", "3-hidden"])
@pytest.mark.parametrize("weight_std", [0.5, 1.5, 4.0])
def test_the_sweeps_draw_what_the_exact_logits_draw(weight_std, sizes, dtype, sweep):
    """The bounded sweep decides most draws from Taylor bounds on the logit (p W, p (1 - p) w^2 / 2, and a bound
    on the rest); the native kernel computes every logit from multiplicatively updated moments, by products over
    planned groups of inputs: every draw of either equals the draw from the exact float64 logit with the same
    uniform (200 chains, every directed hidden layer, betas from 0 to 1). Deterministic (fixed seeds)."""
    _needs_native(sweep)
    model = DBN.random(sizes, weight_std=weight_std, bias_std=1.0, generator=torch.Generator().manual_seed(1))
    model = model.to(dtype=dtype)
    v = (torch.rand(20, 60, generator=torch.Generator().manual_seed(2)) < 0.4).to(dtype)
    path = DBNPosteriorPath(model, sweep=sweep)
    assert all(path.sweep_route(l, v.device) == sweep for l in range(1, len(sizes) - 1))
    draws, wrong = _sweep_mismatches(model, v, 10, [0.0, 0.05, 0.3, 0.7, 1.0, 1.0], seed=0, sweep=sweep)
    assert draws > 0.98 * 200 * 6 * sum(sizes[1:-1]) and wrong == 0


def test_the_replay_catches_a_bound_that_is_too_narrow(monkeypatch):
    """The check above has power: without the bound on the Taylor rest, draws go wrong and the replay counts them."""
    model = DBN.random((60, 40, 30), weight_std=1.5, bias_std=1.0, generator=torch.Generator().manual_seed(1))
    v = (torch.rand(20, 60, generator=torch.Generator().manual_seed(2)) < 0.4).float()
    init = DBNPosteriorPath.__init__

    def without_rest(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._taylor[1][:, 1] = 0.0

    monkeypatch.setattr(DBNPosteriorPath, "__init__", without_rest)
    _, wrong = _sweep_mismatches(model, v, 10, [0.0, 0.05, 0.3, 0.7, 1.0, 1.0], seed=0)
    assert wrong > 50


def test_the_replay_catches_a_native_sweep_at_the_wrong_temperature(monkeypatch):
    """The replay has power over the native kernel too: run at 0.9 beta, its draws go wrong and are counted."""
    _needs_native("native")
    model = DBN.random((60, 40, 30), weight_std=1.5, bias_std=1.0, generator=torch.Generator().manual_seed(1))
    v = (torch.rand(20, 60, generator=torch.Generator().manual_seed(2)) < 0.4).float()
    sweep = DBNPosteriorPath._native_sweep_

    def cooler(self, l, x, linear, p_on, p_off, beta, generator):
        sweep(self, l, x, linear, p_on, p_off, 0.9 * beta, generator)

    monkeypatch.setattr(DBNPosteriorPath, "_native_sweep_", cooler)
    _, wrong = _sweep_mismatches(model, v, 10, [0.0, 0.05, 0.3, 0.7, 1.0, 1.0], seed=0, sweep="native")
    assert wrong > 50


def _saturating_dbn(dtype, visible_bias: float, weight: float) -> DBN:
    """A DBN whose visible logits a_0 can reach beyond the dtype's range for sigmoid (all x_1 on or off)."""
    n0, n1, n2 = 10, 60, 5
    weights = [torch.full((n0, n1), weight, dtype=dtype), 0.1 * torch.ones(n1, n2, dtype=dtype)]
    biases = [torch.full((n0,), visible_bias, dtype=dtype), torch.full((n1,), 10.0, dtype=dtype)]
    return DBN(weights, biases + [torch.zeros(n2, dtype=dtype)], [torch.full((n1,), -30.0, dtype=dtype)])


@pytest.mark.parametrize("sweep", ["bounded", "native"])
@pytest.mark.parametrize(
    "dtype, visible_bias, weight", [(torch.float32, -110.0, 2.0), (torch.float64, -760.0, 20.0)], ids=["f32", "f64"]
)
def test_the_sweeps_recover_underflowed_probabilities(dtype, visible_bias, weight, sweep, monkeypatch):
    """The bounded and native sweeps update p = sigmoid(a) of the layer below multiplicatively, and a p that
    underflowed to 0 would stay 0 when flips bring a back (a review found 1,001 of 12,000 draws wrong on the float32
    model here, v = 0, x_1 starting off and turning on): where the logits can leave the dtype's range the sweeps
    recompute the rows whose p or 1 - p fell below the smallest normal number, and every draw is right again."""
    _needs_native(sweep)
    model = _saturating_dbn(dtype, visible_bias, weight)
    v = torch.zeros(4, 10, dtype=dtype)
    assert DBNPosteriorPath(model)._fragile[1]
    draws, wrong = _sweep_mismatches(model, v, 50, [1.0, 1.0], seed=0, sweep=sweep)
    assert draws > 20_000 and wrong == 0
    init = DBNPosteriorPath.__init__

    def without_the_guard(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._fragile = [False] * len(self._fragile)

    monkeypatch.setattr(DBNPosteriorPath, "__init__", without_the_guard)
    assert _sweep_mismatches(model, v, 50, [1.0, 1.0], seed=0, sweep=sweep)[1] > 500  # the check has power
    within = _saturating_dbn(torch.float32, -40.0, 0.5)  # logits within +-70: no rows are watched
    assert not DBNPosteriorPath(within)._fragile[1]


@pytest.mark.parametrize("dtype, visible_bias, weight", [(torch.float32, -110.0, 50.0), (torch.float64, -800.0, 300.0)],
                         ids=["f32", "f64"])  # fmt: skip
def test_the_native_sweep_guards_underflow_beyond_the_bounded_sweeps_weights(dtype, visible_bias, weight):
    """Weights beyond the bounded sweep's +-20 still have a native plan when few inputs carry them (here each of 16
    visible units feeds 3 hidden units with one weight of 50 or 300): the native sweep's moments are updated
    multiplicatively there too, so the underflow guard must watch those layers (a review found 3,200 of 28,800
    draws wrong, and AIS estimates of log f(v) 0.4 to 0.6 nats low, before it did)."""
    _needs_native("native")
    n0, n1, n2 = 16, 48, 5
    w = torch.zeros(n0, n1, dtype=dtype)
    for i in range(n0):
        w[i, 3 * i : 3 * i + 3] = weight
    biases = [torch.full((n0,), visible_bias, dtype=dtype), torch.zeros(n1, dtype=dtype), torch.zeros(n2, dtype=dtype)]
    model = DBN([w, 0.1 * torch.ones(n1, n2, dtype=dtype)], biases, [torch.zeros(n1, dtype=dtype)])
    path = DBNPosteriorPath(model, sweep="native")
    assert path._taylor[1] is None and path._fragile[1]
    draws, wrong = _sweep_mismatches(model, torch.zeros(4, n0, dtype=dtype), 50, [1.0, 1.0], seed=0, sweep="native")
    assert draws > 0.98 * 4 * 50 * n1 * 2 and wrong == 0


@pytest.mark.parametrize("block", [1, 5, 40])
def test_the_bounded_sweeps_samples_do_not_depend_on_its_block_of_bounds(block, monkeypatch):
    """The bounds only decide which draws are computed exactly, so the samples are the same bits whatever the number
    of units whose bounds are computed at once (and moved after each flip in the block): a wrong move of the later
    units' bounds after a flip would show as a different sample somewhere in 6 sweeps of 2 layers x 200 chains."""
    import raise_eval.paths.posterior.sweeps as posterior  # the sweeps' module: _BOUND_BLOCK

    model = DBN.random((60, 40, 30, 20), weight_std=1.5, bias_std=1.0, generator=torch.Generator().manual_seed(1))
    v = (torch.rand(20, 60, generator=torch.Generator().manual_seed(2)) < 0.4).float()

    def run():
        path = DBNPosteriorPath(model, sweep="bounded")
        g = torch.Generator().manual_seed(0)
        state, _ = path.start(v, 10, g)
        state = path.clone_state(state)
        for beta in [0.0, 0.05, 0.3, 0.7, 1.0, 1.0]:
            path.transition_(state, beta, g)
        return state.layers[1:]

    reference = run()
    monkeypatch.setattr(posterior, "_BOUND_BLOCK", block)
    assert all(torch.equal(a, b) for a, b in zip(reference, run()))


def test_rows_are_copied_bit_for_bit():
    """`_copy_rows_` (index_copy_ through 16-byte elements where a row's bytes allow) writes exactly index_copy_'s
    bits, NaN payloads, -0. and infinities included, on rows that take the fast view and rows that do not (a width
    whose bytes are not a multiple of 16, a view that does not start on a 16-byte boundary)."""
    from raise_eval.paths.posterior import _copy_rows_

    g = torch.Generator().manual_seed(0)
    specials = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf"), 1e-45])
    for dtype, shape in [(torch.float32, (50, 3, 28)), (torch.float32, (50, 7)), (torch.float64, (50, 6))]:
        dest = torch.randn(shape, generator=g, dtype=dtype)
        source = torch.randn((9,) + shape[1:], generator=g, dtype=dtype)
        source.view(-1)[: len(specials)] = specials.to(dtype)
        bits = torch.int32 if dtype == torch.float32 else torch.int64
        source.view(bits).view(-1)[0] ^= 5  # a NaN with another payload
        index = torch.randperm(shape[0], generator=g)[:9]
        want = dest.clone().index_copy_(0, index, source)
        _copy_rows_(dest, index, source)
        assert torch.equal(dest.view(bits), want.view(bits))
    offset = torch.randn(51, 4, generator=g)[1:]  # rows of 16 bytes, starting 16 bytes in: aligned
    shifted = torch.randn(201, generator=g)[1:].view(50, 4)  # starting 4 bytes in: not aligned, the plain route
    columns = torch.randn(50, 8, generator=g)[:, :4]  # not contiguous: the plain route
    odd = torch.randn(50, 3, generator=g, dtype=torch.float64)  # 24-byte rows: the plain route
    for dest in (offset, shifted, columns, odd):
        source = torch.randn(3, dest.shape[1], generator=g, dtype=dest.dtype)
        for index in (torch.tensor([7, 0, 49]), torch.tensor([], dtype=torch.long)):
            source_rows = source[: index.numel()]
            want = dest.clone().index_copy_(0, index, source_rows)
            _copy_rows_(dest, index, source_rows)
            assert torch.equal(dest, want)
    with pytest.raises(RuntimeError):  # another dtype of the same row bytes is refused, as by index_copy_
        _copy_rows_(torch.zeros(5, 4, dtype=torch.float64), torch.tensor([1]), torch.ones(1, 8))
