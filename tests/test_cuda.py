"""The exact-answer and unbiasedness checks again, with the model, the states and the generator on a GPU.

These run where CUDA is present (skipped elsewhere, so CI on a CPU machine skips them); setting
RAISE_EVAL_TEST_DEVICE=cpu runs the same checks on the CPU, which is how the file itself is checked without a GPU. The
truths (exact log Z, exact log p_ann(v), exact log f(v)) are enumerated on the CPU, as in the CPU tests: from the
float32-rounded RBM for its float32 runs, from the float64 models otherwise (the difference is far below the standard
errors); the estimators run on the device in float64 and float32. Each assert_unbiased is a 4-sigma check
(tests/statistics.py): about 6e-5 false alarms per z-score, about 150 z-scores here, so about 1e-2 per change of seeds;
with the seeds fixed each run on one device is deterministic.
"""

from __future__ import annotations

import os

import pytest
import torch

from raise_eval import BoltzmannPath, ais, data_base_rates, exact, linear_schedule, raise_log_likelihood
from raise_eval.estimators.ladder import ladder_pass
from raise_eval.estimators.unnormalized import log_unnormalized_estimate
from raise_eval.paths.mixed import MixedPath
from raise_eval.paths.trajectory import trajectory_path
from tests.mixed_models import exact_visible_samples, tiny_pair
from tests.statistics import assert_unbiased
from tests.trajectories import random_walk, start_biases

# Unset: CUDA where present, else skipped. Set (cuda, cuda:1, cpu): that device, and a run that asked for CUDA
# where there is none fails rather than skipping (scripts/check_gpu.sh sets it).
DEVICE = os.environ.get("RAISE_EVAL_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(
    "RAISE_EVAL_TEST_DEVICE" not in os.environ and not torch.cuda.is_available(),
    reason="no CUDA device (RAISE_EVAL_TEST_DEVICE=cpu runs these checks on the CPU)",
)
CHAINS = 200_000
DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])


def _generator(seed: int) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(seed)


def _on_device(model, dtype=torch.float64):
    return model.to(device=DEVICE, dtype=dtype)


def _test_vectors(n_visible: int) -> torch.Tensor:
    v = exact.binary_configurations(n_visible)
    return v[[0, 5, 2**n_visible - 3, 2**n_visible - 1]]


def _cpu(x: torch.Tensor) -> torch.Tensor:
    return x.detach().to("cpu")


def test_exact_answers_match_the_cpus(tiny_rbm, tiny_dbm):
    """Enumeration on the device gives the CPU's log Z and log f(v) in float64 (to rounding)."""
    for model in (tiny_rbm, tiny_dbm):
        here = _on_device(model)
        assert exact.log_partition(here) == pytest.approx(exact.log_partition(model), abs=1e-10)
        v = exact.binary_configurations(model.n_visible)
        on_device = exact.log_unnormalized_visible(here, v.to(DEVICE))
        assert torch.allclose(_cpu(on_device), exact.log_unnormalized_visible(model, v), atol=1e-10)


@DTYPES
@pytest.mark.parametrize("k", [1, 2, 3, 50])
def test_rbm_ais_is_unbiased_for_z(tiny_rbm, train_vectors, k, dtype):
    model = _on_device(tiny_rbm, dtype)
    path = BoltzmannPath(model, data_base_rates(model, train_vectors.to(DEVICE, dtype)))
    result = ais(path, linear_schedule(k), CHAINS, generator=_generator(k))
    assert result.log_weights.device.type == torch.device(DEVICE).type and result.log_weights.dtype == torch.float64
    assert_unbiased(_cpu(result.log_weights), exact.log_partition(tiny_rbm.to(dtype=dtype)))


@DTYPES
@pytest.mark.parametrize("k", [1, 2, 3])
def test_rbm_raise_is_unbiased_for_p_ann(tiny_rbm, k, dtype):
    model = _on_device(tiny_rbm, dtype)
    path = BoltzmannPath(model)
    betas = linear_schedule(k)
    v = exact.binary_configurations(8)[[0, 37, 200, 255]]
    p_ann = exact.annealing_model_marginal(tiny_rbm.to(dtype=dtype), BoltzmannPath(tiny_rbm).base_biases, betas)
    result = raise_log_likelihood(path, v.to(DEVICE, dtype), betas, CHAINS, generator=_generator(10 + k))
    assert_unbiased(_cpu(result.log_weights), torch.log(p_ann[exact.configuration_index(v)]))


@DTYPES
@pytest.mark.parametrize("k", [1, 3])
def test_dbm_ais_and_heating_raise_are_unbiased(tiny_dbm, k, dtype):
    model = _on_device(tiny_dbm, dtype)
    path = BoltzmannPath(model)
    betas = linear_schedule(k)
    assert_unbiased(_cpu(ais(path, betas, CHAINS, generator=_generator(100 + k)).log_weights),
                    exact.log_partition(tiny_dbm))  # fmt: skip
    v = _test_vectors(model.n_visible)
    p_ann = exact.annealing_model_marginal(tiny_dbm, BoltzmannPath(tiny_dbm).base_biases, betas)
    result = raise_log_likelihood(path, v.to(DEVICE, dtype), betas, CHAINS, generator=_generator(200 + k))
    assert result.start == "heating"
    assert_unbiased(_cpu(result.log_weights), torch.log(p_ann[exact.configuration_index(v)]))


@DTYPES
@pytest.mark.parametrize("start", ["heated", "unrolled"])
@pytest.mark.parametrize("k", [1, 3])
def test_dbn_raise_is_unbiased_for_p_ann(tiny_dbn, k, start, dtype):
    model = _on_device(tiny_dbn, dtype)
    path = BoltzmannPath(model.top)
    betas = linear_schedule(k)
    v = _test_vectors(model.n_visible)
    p_ann = exact.annealing_model_marginal(tiny_dbn, BoltzmannPath(tiny_dbn.top).base_biases, betas)
    result = raise_log_likelihood(
        path, v.to(DEVICE, dtype), betas, CHAINS, generator=_generator(600 + k), unroll=model, dbn_start=start
    )
    assert result.start == start
    assert_unbiased(_cpu(result.log_weights), torch.log(p_ann[exact.configuration_index(v)]))


@pytest.mark.parametrize("k", [1, 3])
def test_dbn_log_f_by_per_vector_ais_is_unbiased(tiny_dbn, k):
    v = _test_vectors(tiny_dbn.n_visible)
    draws = 20_000
    est = log_unnormalized_estimate(
        _on_device(tiny_dbn), v.to(DEVICE).repeat_interleave(draws, 0), method="ais", ais_steps=k, ais_chains=1,
        generator=_generator(7 + k),
    )  # fmt: skip
    assert_unbiased(
        _cpu(est.log_unnormalized).reshape(4, draws), exact.log_unnormalized_visible(tiny_dbn, v), max_se=0.1
    )


@pytest.mark.parametrize(
    "visible,hidden",
    [("gaussian", "bernoulli"), ("categorical", "bernoulli"), ("spin", "spin"), ("bernoulli", "gaussian")],
)
@pytest.mark.parametrize("k", [1, 3])
def test_typed_layers_ais_and_raise_are_unbiased(visible, hidden, k):
    cpu_model = tiny_pair(visible, hidden)
    model = cpu_model.to(device=DEVICE)
    path = MixedPath(model)
    betas = linear_schedule(k)
    result = ais(path, betas, 40_000, generator=_generator(100 + k))
    assert_unbiased(_cpu(result.log_weights), exact.log_partition(cpu_model))
    v = exact_visible_samples(cpu_model, 3, torch.Generator().manual_seed(3))
    truth = exact.log_annealing_model(cpu_model, MixedPath(cpu_model).base_biases, betas, v)
    chains = 600_000 if k == 1 else 40_000
    result = raise_log_likelihood(path, v.to(DEVICE), betas, chains, generator=_generator(200 + k))
    assert_unbiased(_cpu(result.log_weights), truth)


@pytest.mark.parametrize("sizes", [(8, 6), (5, 4, 3)], ids=["rbm", "dbm"])
@pytest.mark.parametrize("k", [1, 3])
def test_trajectory_ais_and_raise_are_unbiased(sizes, k):
    walk = random_walk(sizes, seed=1)
    path = trajectory_path([m.to(device=DEVICE) for m in walk], [b.to(DEVICE) for b in start_biases(walk[0])])
    betas = path.schedule(k)
    knots = path.knot_indices(betas)
    result = ladder_pass(path, betas, 100_000, rungs=knots, generator=_generator(10 + k))
    for point, model in zip(path.checkpoint_points, walk):
        assert_unbiased(_cpu(result.log_weights[point]), exact.log_partition(model))
    cpu_path = trajectory_path(walk, start_biases(walk[0]))
    p_ann = exact.annealing_model_marginal_along([cpu_path.at(b) for b in betas.tolist()])
    v = _test_vectors(walk[0].n_visible)
    result = raise_log_likelihood(path, v.to(DEVICE), betas, 100_000, generator=_generator(20 + k))
    assert_unbiased(_cpu(result.log_weights), torch.log(p_ann[exact.configuration_index(v)]))


def test_same_seed_same_bits(tiny_dbm):
    """Same seed and device: the same weights, bit for bit (AIS and heating RAISE)."""
    path = BoltzmannPath(_on_device(tiny_dbm, torch.float32))
    betas = linear_schedule(20)
    v = _test_vectors(tiny_dbm.n_visible).to(DEVICE, torch.float32)

    def run(seed):
        return (ais(path, betas, 5_000, generator=_generator(seed)).log_weights,
                raise_log_likelihood(path, v, betas, 500, generator=_generator(seed)).log_weights)  # fmt: skip

    (a1, r1), (a2, r2), (a3, _) = run(1), run(1), run(2)
    assert torch.equal(a1, a2) and torch.equal(r1, r2) and not torch.equal(a1, a3)


# ----------------------------------------------------------------------------------------------- step programs
# On CUDA the steps of binary Boltzmann paths run as step programs, many per CUDA graph (`raise_eval.step_programs`);
# the checks above take them at the default graph size (32 steps: K = 50 runs one graph). These take them at graph
# sizes that leave every kind of boundary (graphs of 1 to 4 steps at K = 1, 2, 3 and 7: the first step eager, whole
# graphs, an eager remainder after them at K = 7 with 4), with the products in the model's dtype and split into
# bfloat16 terms.
GRAPHS = pytest.mark.skipif(torch.device(DEVICE).type != "cuda", reason="CUDA graphs need a CUDA device")


@GRAPHS
@pytest.mark.parametrize("products", ["model", "half-split", "tf32-split"])
@pytest.mark.parametrize("per_graph", [1, 2, 3, 4])
@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_graphs_of_steps_are_unbiased(tiny_rbm, tiny_dbm, train_vectors, k, per_graph, products):
    from raise_eval.kernels.split_products import out_dtype_products_available
    from raise_eval.step_programs import loop_options

    if products == "half-split" and not out_dtype_products_available(torch.device(DEVICE)):
        pytest.skip(f"torch {torch.__version__} has no bfloat16 products into float32 (mm's out_dtype)")

    with loop_options(steps_per_graph=per_graph, products=products):
        _assert_ais_and_raise_unbiased(tiny_rbm, tiny_dbm, train_vectors, k, 300, lambda model: model)


def _assert_ais_and_raise_unbiased(tiny_rbm, tiny_dbm, train_vectors, k: int, seed: int, annealed) -> None:
    """AIS of the float32 RBM (data base rates) and DBM on the device against their exact log Z, and RAISE (from the
    test vectors; the DBM's through heating) against the exact annealing-model marginal of `annealed(model)`: the
    model whose path the chains anneal (the model itself, or a rounded path's twin), from seeds seed + k, seed + 100 +
    k, seed + 200 + k and seed + 300 + k."""
    betas = linear_schedule(k)
    rbm = tiny_rbm.to(dtype=torch.float32)
    path = BoltzmannPath(_on_device(rbm, torch.float32), data_base_rates(rbm, train_vectors.float()))
    assert_unbiased(_cpu(ais(path, betas, CHAINS, generator=_generator(seed + k)).log_weights),
                    exact.log_partition(rbm))  # fmt: skip
    v = exact.binary_configurations(8)[[0, 37, 200, 255]]
    p_ann = exact.annealing_model_marginal(annealed(rbm), [b.cpu() for b in path.base_biases], betas)
    on_device = v.to(DEVICE, torch.float32)
    result = raise_log_likelihood(path, on_device, betas, CHAINS, generator=_generator(seed + 100 + k))
    assert_unbiased(_cpu(result.log_weights), torch.log(p_ann[exact.configuration_index(v)]))
    dbm = tiny_dbm.to(dtype=torch.float32)
    path = BoltzmannPath(_on_device(dbm, torch.float32))
    assert_unbiased(_cpu(ais(path, betas, CHAINS, generator=_generator(seed + 200 + k)).log_weights),
                    exact.log_partition(dbm))  # fmt: skip
    v = _test_vectors(dbm.n_visible)
    p_ann = exact.annealing_model_marginal(annealed(dbm), BoltzmannPath(dbm).base_biases, betas)
    on_device = v.to(DEVICE, torch.float32)
    result = raise_log_likelihood(path, on_device, betas, CHAINS, generator=_generator(seed + 300 + k))
    assert result.start == "heating"
    assert_unbiased(_cpu(result.log_weights), torch.log(p_ann[exact.configuration_index(v)]))


@GRAPHS
def test_a_graph_draws_what_the_same_steps_draw_eagerly(tiny_dbm):
    """The generator's semantics in a graph: the same seed gives the same bits with graphs of 4 steps, of 7, and with
    the program run eagerly (the graph registers the generator; each replay takes the next random numbers)."""
    _assert_graphs_draw_what_eager_steps_draw(BoltzmannPath(_on_device(tiny_dbm, torch.float32)))


def _assert_graphs_draw_what_eager_steps_draw(path) -> None:
    """AIS with K = 30 from seed 9 in graphs of 4 steps, of 7 and eagerly: the same log-weights and the same next
    random numbers of the generator, bit for bit."""
    from raise_eval.step_programs import loop_options

    betas = linear_schedule(30)
    runs = []
    for per_graph in (0, 4, 7, 4):
        with loop_options(steps_per_graph=per_graph):
            generator = _generator(9)
            weights = ais(path, betas, 5_000, generator=generator).log_weights
            runs.append((weights, torch.rand(3, generator=generator, device=DEVICE)))
    for weights, after in runs[1:]:
        assert torch.equal(weights, runs[0][0]) and torch.equal(after, runs[0][1])


def _split_product(products: str, seed: int):
    """x W of a random float32 784-500 RBM's program with `products`, for 64 of its base's samples: (the product
    (64, 500), x W in float64, max over rows of x |W| in float64, the model)."""
    from raise_eval import RBM
    from raise_eval.kernels.binary_program import BinaryGibbsProgram

    g = _generator(seed)
    model = RBM.random(784, 500, weight_std=0.05, generator=g, dtype=torch.float32, device=DEVICE)
    path = BoltzmannPath(model)
    program = BinaryGibbsProgram(path, products=products)
    program.begin(path.sample_initial(64, g), None, 0.5)
    x = program.layers[0]
    out = torch.empty(64, 500, device=DEVICE)
    program._product(0, 1, out, accumulate=False)
    reference = x.double() @ model.weights[0].double()
    scale = (x.double() @ model.weights[0].double().abs()).max()
    return out, reference, scale, model


@GRAPHS
def test_half_split_products_are_the_float32_weights_times_the_states():
    """x W through three bfloat16 terms equals x W in float64 to float32 accumulation (the split is exact)."""
    from raise_eval.kernels.split_products import out_dtype_products_available

    if not out_dtype_products_available(torch.device(DEVICE)):
        pytest.skip(f"torch {torch.__version__} has no bfloat16 products into float32 (mm's out_dtype)")
    out, reference, scale, _ = _split_product("half-split", 5)
    assert float((out.double() - reference).abs().max()) <= 1e-6 * float(scale)


@GRAPHS
def test_tf32_split_products_are_within_their_bound():
    """x W through W's two TF32 terms on the TF32 tensor cores differs from x W in float64 by at most the reported
    bound on the split (per row: sum_ij 2^-10 |lo_ij| covers every row of binary states) plus float32 accumulation."""
    from raise_eval.kernels.split_products import tf32_split_error_bound

    out, reference, scale, model = _split_product("tf32-split", 6)
    rows = ((out.double() - reference).abs()).sum(-1)  # |x (W - W') y| for the worst +-1 y, per row
    assert float(rows.max()) <= tf32_split_error_bound(model.weights) + 500 * 1e-6 * float(scale)
    assert not torch.backends.cuda.matmul.allow_tf32  # the setting is the caller's again


def _rounded_twin(model, products: str):
    """The float32 model the chains of the half or TF32 path anneal (its weights rounded as the program rounds
    them), on the CPU, for the exact answers."""
    from raise_eval.models import LayeredBoltzmannMachine

    from raise_eval.kernels.split_products import path_weights

    weights = [path_weights(products, w.float()).float() for w in model.weights]
    return LayeredBoltzmannMachine(weights, [b.float() for b in model.biases], model.weight_scale)


@GRAPHS
@pytest.mark.parametrize("products", ["half-path", "tf32-path"])
@pytest.mark.parametrize("per_graph", [1, 3])
@pytest.mark.parametrize("k", [1, 2, 7])
def test_rounded_paths_in_graphs_are_unbiased(tiny_rbm, tiny_dbm, train_vectors, k, per_graph, products):
    """The half and TF32 paths on CUDA: AIS against the model's exact log Z (its last link is to the model's own
    distribution), RAISE against the exact annealing-model marginal of the rounded model whose path the chains
    anneal (an RBM from the test vectors, a DBM through heating), in graphs of 1 and 3 steps."""
    from raise_eval.kernels.split_products import HALF_PATH, out_dtype_products_available
    from raise_eval.step_programs import loop_options

    if products == "half-path" and not out_dtype_products_available(torch.device(DEVICE), HALF_PATH):
        pytest.skip(f"torch {torch.__version__} has no float16 products into float32 (mm's out_dtype)")
    with loop_options(steps_per_graph=per_graph, products=products):
        twin = lambda model: _rounded_twin(model, products)  # noqa: E731
        _assert_ais_and_raise_unbiased(tiny_rbm, tiny_dbm, train_vectors, k, 800, twin)


@GRAPHS
@pytest.mark.parametrize("products", ["half-path", "tf32-path"])
def test_rounded_path_products_are_the_rounded_weights_times_the_states(products):
    """x W~ on the tensor cores equals x W~ in float64 to float32 accumulation, W~ the weights rounded to float16
    or TF32 (read exactly: binary states and rounded weights, one product); and TF32 is the caller's setting
    again afterwards."""
    from raise_eval.kernels.split_products import HALF_PATH, out_dtype_products_available, path_weights

    if products == "half-path" and not out_dtype_products_available(torch.device(DEVICE), HALF_PATH):
        pytest.skip(f"torch {torch.__version__} has no float16 products into float32 (mm's out_dtype)")
    from raise_eval import RBM
    from raise_eval.kernels.binary_program import BinaryGibbsProgram

    g = _generator(7)
    model = RBM.random(784, 500, weight_std=0.05, generator=g, dtype=torch.float32, device=DEVICE)
    path = BoltzmannPath(model)
    program = BinaryGibbsProgram(path, products=products)
    program.begin(path.sample_initial(64, g), None, 0.5)
    x = program.layers[0]
    out = torch.empty(64, 500, device=DEVICE)
    program._product(0, 1, out, accumulate=False)
    rounded = path_weights(products, model.weights[0]).double()
    reference = x.double() @ rounded
    scale = (x.double() @ model.weights[0].double().abs()).max()
    assert float((out.double() - reference).abs().max()) <= 1e-6 * float(scale)
    assert float((rounded - model.weights[0].double()).abs().max()) > 0  # the weights were rounded
    assert not torch.backends.cuda.matmul.allow_tf32


@GRAPHS
@pytest.mark.parametrize("k", [2, 7])
def test_compiled_elementwise_work_is_unbiased(tiny_rbm, k):
    from raise_eval.step_programs import loop_options

    rbm = tiny_rbm.to(dtype=torch.float32)
    path = BoltzmannPath(_on_device(rbm, torch.float32))
    with loop_options(steps_per_graph=3, fuse="compile"):
        result = ais(path, linear_schedule(k), CHAINS, generator=_generator(700 + k))
    assert_unbiased(_cpu(result.log_weights), exact.log_partition(rbm))


@GRAPHS
@pytest.mark.parametrize("per_graph", [2, 3])
@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_hmc_in_graphs_is_unbiased_forward_and_reverse(k, per_graph):
    """BDMC's HMC transitions as a step program in CUDA graphs (asked for with programs='always'), on a linear-Gaussian
    model written as a user would (an nn.Linear decoder in `DecoderModel`: its forward and backward passes captured),
    float64: forward weights unbiased for p(x), reverse ones from exact posterior samples for 1/p(x)."""
    from raise_eval.models import DecoderModel, GaussianPosterior, LinearGaussianModel
    from torch import nn

    from raise_eval import DirectedPath, reverse_ais
    from raise_eval.kernels import HMCKernel
    from raise_eval.step_programs import loop_options

    g = torch.Generator().manual_seed(0)
    lg = LinearGaussianModel(torch.randn(6, 2, generator=g, dtype=torch.float64) * 0.25,
                             torch.randn(6, generator=g, dtype=torch.float64), 1.0)  # fmt: skip
    _, x = lg.sample_joint(3, g)
    decoder = nn.Linear(2, 6).double()
    with torch.no_grad():
        decoder.weight.copy_(lg.W)
        decoder.bias.copy_(lg.b)
    model = DecoderModel(decoder.to(DEVICE), latent_dim=2, likelihood="gaussian", scale=1.0).requires_grad_(False)
    path = DirectedPath(model, x.to(DEVICE))
    kernel = HMCKernel(path, 0.5, num_leapfrog=3)
    posterior = GaussianPosterior(lg).sample(x, CHAINS, g).to(DEVICE)
    with loop_options(programs="always", steps_per_graph=per_graph):
        forward = ais(path, linear_schedule(k), CHAINS, generator=_generator(800 + k), kernel=kernel)
        reverse = reverse_ais(path, path.state_from_latents(posterior), linear_schedule(k),
                              generator=_generator(900 + k), kernel=kernel)  # fmt: skip
    log_p = lg.log_marginal(x)
    assert_unbiased(_cpu(forward.log_weights), log_p)
    assert_unbiased(_cpu(reverse.log_weights), -log_p)


@GRAPHS
@pytest.mark.parametrize("per_graph", [2, 4])
def test_the_ladder_reads_its_rungs_between_graphs(tiny_rbm, per_graph):
    """`ladder_pass` on a Boltzmann path in CUDA graphs: no graph spans a rung, whose log-weights are unbiased for
    the log Z of the model at that beta."""
    from raise_eval.estimators.ladder import ladder_pass
    from raise_eval.step_programs import loop_options

    path = BoltzmannPath(_on_device(tiny_rbm, torch.float32))
    betas = linear_schedule(13)
    with loop_options(steps_per_graph=per_graph):
        result = ladder_pass(path, betas, CHAINS, rungs=[3, 5, 10], generator=_generator(40 + per_graph))
    cpu_path = BoltzmannPath(tiny_rbm.to(dtype=torch.float32))
    for r, index in enumerate(result.rungs[1:], start=1):  # (rung 0 is the base's exact log Z)
        assert_unbiased(_cpu(result.log_weights[r]), exact.log_partition(cpu_path.at(float(betas[index]))))


# The fully visible models' site scan as a step program (`kernels.site_program`): graphs of 1, 2 and 3 steps at
# K = 1, 2, 3 and 7 (every kind of boundary: the first step eager, whole graphs, an eager remainder), Gibbs and
# Metropolis, on a tiny Potts model and a tiny Ising model with bases fitted to data, float64 (the truths enumerated on
# the CPU); a step that cannot be captured (a host read in the scan) fails these rather than running eagerly.
def _fully_visible_path(kind: str, method: str, device: str = DEVICE, dtype=torch.float64):
    from raise_eval.paths.fully_visible import FullyVisiblePath, data_base_fields
    from tests.fully_visible_models import random_model, spin_ring

    if kind == "ring":
        return FullyVisiblePath(spin_ring().to(device=device, dtype=dtype), None, method)
    sites, size, q = {"potts": ("categorical", 3, 3), "ising": ("spin", 4, 2)}[kind]
    model = random_model(sites, size, q, seed=11, scale=0.8)
    train = model.sites_from_codes(torch.randint(0, q, (30, size), generator=torch.Generator().manual_seed(12)))
    base = data_base_fields(model, train, pseudocount=0.05)
    return FullyVisiblePath(model.to(device=device, dtype=dtype), base.to(device=device, dtype=dtype), method)


@GRAPHS
@pytest.mark.filterwarnings("error:.*could not be captured:RuntimeWarning")
@pytest.mark.parametrize("method", ["gibbs", "metropolis"])
@pytest.mark.parametrize("per_graph", [1, 2, 3])
@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_fully_visible_graphs_of_steps_are_unbiased(k, per_graph, method):
    from raise_eval.exact import fully_visible as exact_fv
    from raise_eval.step_programs import loop_options

    betas = linear_schedule(k)
    for kind in ("potts", "ising"):
        path = _fully_visible_path(kind, method)
        cpu_path = _fully_visible_path(kind, method, device="cpu")
        model = cpu_path.model
        codes = exact_fv.site_configurations(model.n_visible, model.num_states)
        v = model.sites_from_codes(codes[[0, 5, codes.shape[0] - 2]])
        with loop_options(steps_per_graph=per_graph):
            result = ais(path, betas, CHAINS, generator=_generator(1000 + k))
            raised = raise_log_likelihood(path, v.to(DEVICE), betas, CHAINS, generator=_generator(1100 + k))
        assert_unbiased(_cpu(result.log_weights), exact.log_partition(model))
        truth = exact_fv.log_annealing_model(model, cpu_path.base_biases, betas, v, method=method)
        assert raised.start == "test vector"
        assert_unbiased(_cpu(raised.log_weights), truth)


@GRAPHS
@pytest.mark.filterwarnings("error:.*could not be captured:RuntimeWarning")
@pytest.mark.parametrize("method", ["gibbs", "metropolis"])
@pytest.mark.parametrize("kind", ["potts", "ring"])
def test_fully_visible_graphs_draw_what_the_same_steps_draw_eagerly(kind, method):
    """The same seed gives the same bits from graphs of 4 steps, of 7, and from the program run eagerly, for a dense
    scan and a scan by colour, float32 (the generator registered with each graph)."""
    _assert_graphs_draw_what_eager_steps_draw(_fully_visible_path(kind, method, dtype=torch.float32))
