"""The step program of binary Boltzmann paths (`kernels.binary_program`, run by `step_programs`), on the CPU.

On CUDA the program runs many steps per CUDA graph (tests/test_cuda.py checks that there); here it runs eagerly
(programs='always'), which checks its arithmetic and distributions: the weight update against the path's own
log-density ratio (exact, to float64 rounding), then unbiasedness at K = 1, 2, 3 where off-by-one errors show (4-sigma
checks, tests/statistics.py: about 6e-5 false alarms per z-score, about 40 z-scores here), then bits.
"""

from __future__ import annotations

import pytest
import torch

from raise_eval import BoltzmannPath, ais, anneal, exact, linear_schedule, raise_log_likelihood
from raise_eval.kernels.binary_program import BinaryGibbsProgram
from raise_eval.kernels.split_products import (
    split_error_bound,
    split_terms,
    terms_needed,
    tf32_round,
    tf32_split_error_bound,
    tf32_terms,
)
from raise_eval.step_programs import LoopOptions, current_loop_options, loop_options
from tests.statistics import assert_unbiased

CHAINS = 200_000


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("fuse", ["none", "fused"])
@pytest.mark.parametrize("betas", [(0.0, 1.0), (0.3, 0.3004), (1.0, 0.0), (0.9, 0.2)], ids=str)
def test_the_weight_update_is_the_paths_log_density_ratio(tiny_rbm, tiny_dbm, betas, fuse):
    """One step's log-weight increment equals log f_b1(x) - log f_b0(x) of the state it leaves, for steps with |dz|
    above and below 1 (both forms of the softplus difference)."""
    for model, clamped in ((tiny_rbm, ()), (tiny_dbm, ()), (tiny_dbm, (0,))):
        path = BoltzmannPath(model, clamped=clamped)
        state = path.sample_initial(500, _gen(1))
        program = BinaryGibbsProgram(path, fuse=fuse)
        program.begin(state, None, betas[0])
        b0, b1 = (torch.tensor(b, dtype=torch.float64) for b in betas)
        program.step(b0, b1, _gen(2))
        after = program.state(betas[1])
        expected = path.log_density_ratio(after, *betas)
        assert torch.allclose(program.log_weights, expected, rtol=0, atol=1e-9)
        if clamped:
            assert torch.equal(after.layers[0], state.layers[0])


def test_the_carried_probabilities_are_the_paths(tiny_dbm):
    path = BoltzmannPath(tiny_dbm)
    program = BinaryGibbsProgram(path)
    program.begin(path.sample_initial(50, _gen(3)), None, 0.0)
    program.step(torch.tensor(0.0, dtype=torch.float64), torch.tensor(0.4, dtype=torch.float64), _gen(4))
    state = program.state(0.4)
    at = path.at(0.4)
    for l in range(1, tiny_dbm.num_layers, 2):
        assert torch.allclose(state.odd_probs[l], at.layer_probs(state.layers, l, state.odd_inputs[l]), atol=1e-12)


@pytest.mark.parametrize("fuse", ["none", "fused"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_rbm_ais_and_raise_are_unbiased(tiny_rbm, train_vectors, k, fuse):
    from raise_eval import data_base_rates

    path = BoltzmannPath(tiny_rbm, data_base_rates(tiny_rbm, train_vectors))
    betas = linear_schedule(k)
    with loop_options(programs="always", fuse=fuse):
        result = ais(path, betas, CHAINS, generator=_gen(k))
        v = exact.binary_configurations(8)[[0, 37, 200, 255]]
        raised = raise_log_likelihood(path, v, betas, CHAINS, generator=_gen(10 + k))
    assert_unbiased(result.log_weights, exact.log_partition(tiny_rbm))
    p_ann = exact.annealing_model_marginal(tiny_rbm, path.base_biases, betas)
    assert_unbiased(raised.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


@pytest.mark.parametrize("fuse", ["none", "fused"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_dbm_ais_and_heating_raise_are_unbiased(tiny_dbm, k, fuse):
    path = BoltzmannPath(tiny_dbm)
    betas = linear_schedule(k)
    v = exact.binary_configurations(tiny_dbm.n_visible)[[0, 5, -3, -1]]
    with loop_options(programs="always", fuse=fuse):
        result = ais(path, betas, CHAINS, generator=_gen(100 + k))
        raised = raise_log_likelihood(path, v, betas, CHAINS, generator=_gen(200 + k))
    assert raised.start == "heating"
    assert_unbiased(result.log_weights, exact.log_partition(tiny_dbm))
    p_ann = exact.annealing_model_marginal(tiny_dbm, path.base_biases, betas)
    assert_unbiased(raised.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


def test_same_seed_same_bits_and_a_continued_run_is_the_uninterrupted_one(tiny_dbm):
    path = BoltzmannPath(tiny_dbm)
    betas = linear_schedule(12)
    start = path.sample_initial(300, _gen(5))

    def run(seed, **kwargs):
        with loop_options(programs="always"):
            return anneal(path, start, betas, generator=_gen(seed), **kwargs)

    (s1, w1), (s2, w2), (_, w3) = run(1), run(1), run(2)
    assert torch.equal(w1, w2) and torch.equal(s1.layers[0], s2.layers[0]) and not torch.equal(w1, w3)
    saved = {}

    def keep(step, state, log_weights):
        if step == 5:
            saved.update(state=path.clone_state(state), log_weights=log_weights.clone(), generator=gen.get_state())

    gen = _gen(1)
    with loop_options(programs="always"):
        anneal(path, start, betas, generator=gen, on_step=keep)
        gen.set_state(saved["generator"])
        s4, w4 = anneal(path, saved["state"], betas, generator=gen, log_weights=saved["log_weights"], start_step=5)
    assert torch.equal(w4, w1) and torch.equal(s4.layers[2], s1.layers[2])


def test_the_start_state_is_left_alone_and_a_kernel_or_info_takes_the_eager_loop(tiny_rbm):
    path = BoltzmannPath(tiny_rbm)
    start = path.sample_initial(20, _gen(6))
    before = start.layers[0].clone()
    calls = []

    def kernel(state, beta, generator):
        calls.append(beta)
        return path.transition(state, beta, generator)

    with loop_options(programs="always"):
        anneal(path, start, linear_schedule(3), generator=_gen(7))
        anneal(path, start, linear_schedule(3), generator=_gen(7), kernel=kernel)
    assert torch.equal(start.layers[0], before) and len(calls) == 3


def test_programs_run_where_the_options_say():
    assert not current_loop_options().runs_on(torch.device("cpu")) or current_loop_options().programs == "always"
    assert LoopOptions().runs_on(torch.device("cuda")) and not LoopOptions().runs_on(torch.device("cpu"))
    assert LoopOptions(programs="always").runs_on(torch.device("cpu"))
    assert not LoopOptions(programs="never").runs_on(torch.device("cuda"))
    assert LoopOptions().fuse_for(torch.device("cuda"), 10**12) == "none"  # compiling is asked for, not assumed
    assert LoopOptions(fuse="auto").fuse_for(torch.device("cpu"), 10**12) == "none"
    assert LoopOptions(fuse="auto").fuse_for(torch.device("cuda"), 1000) == "none"
    assert LoopOptions(fuse="compile").fuse_for(torch.device("cpu"), 1) == "compile"
    choices = "model, half-split, tf32-split, half-path, tf32-path"
    with pytest.raises(ValueError, match=f"products must be one of {choices}; got 'fp8'"):
        LoopOptions(products="fp8")
    with pytest.raises(ValueError, match="steps_per_graph must be a non-negative integer"):
        LoopOptions(steps_per_graph=-1)
    with loop_options(steps_per_graph=4) as options:
        assert current_loop_options() is options and options.steps_per_graph == 4
    assert current_loop_options().steps_per_graph == LoopOptions().steps_per_graph


def test_half_split_products_are_refused_off_cuda_naming_the_setting(tiny_rbm):
    with pytest.raises(ValueError, match="products='half-split' needs a float32 model on a CUDA device"):
        BinaryGibbsProgram(BoltzmannPath(tiny_rbm.to(dtype=torch.float32)), products="half-split")


def test_three_bfloat16_terms_hold_float32_weights_exactly():
    g = _gen(8)
    w = torch.randn(300, 200, generator=g) * torch.logspace(-6, 2, 200)
    terms = split_terms(w, 3)
    assert all(t.dtype == torch.bfloat16 for t in terms)
    assert torch.equal(sum(t.double() for t in terms), w.double())
    assert split_error_bound([w], 1.0, 3) == 0.0 and terms_needed([w]) == 3
    one = split_error_bound([w], 2.0, 1)
    assert one == pytest.approx(2.0 * float((w.double() - w.to(torch.bfloat16).double()).abs().sum()))
    assert 0 < split_error_bound([w], 1.0, 2) < one


def test_two_tf32_terms_hold_float32_weights_to_within_their_bound():
    """hi = W rounded to TF32 (its low 13 significant bits zero, within 2^-11 |W|), lo = W - hi exact in float32; the
    bound holds for binary states whether the tensor cores round lo to TF32 or truncate it."""
    g = _gen(9)
    w = torch.randn(60, 40, generator=g) * torch.logspace(-4, 1, 40)
    hi, lo = tf32_terms(w)
    assert hi.dtype == lo.dtype == torch.float32
    assert int((hi.view(torch.int32) & 0x1FFF).abs().sum()) == 0  # exact in TF32
    assert torch.equal(hi + lo, w) and torch.equal(hi.double() + lo.double(), w.double())
    assert bool(((w - hi).abs() <= 2.0**-11 * w.abs()).all())
    assert tf32_round(torch.tensor([1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11])).tolist() == [1.0, 1.0 + 2.0**-9]  # ties even
    bound = tf32_split_error_bound([w], 2.0)
    assert bound == pytest.approx(2.0 * 2.0**-10 * float(lo.double().abs().sum()))
    bits = lo.view(torch.int32)
    truncated = (bits & ~0x1FFF).view(torch.float32)
    for read in (truncated, tf32_round(lo)):  # what a tensor core may read for lo
        error = w.double() - hi.double() - read.double()
        x = (torch.rand(500, 60, generator=g) < 0.5).double()
        y = (torch.rand(500, 40, generator=g) < 0.5).double() * 2 - 1  # 0/1 and -1/+1 states
        assert float(((x @ error) * y).sum(-1).abs().max()) <= bound / 2.0


def test_tf32_split_products_are_refused_off_cuda_naming_the_setting(tiny_rbm):
    from raise_eval.evaluation.plan import _check_gpu_products
    from raise_eval.evaluation.settings import EvaluateSettings
    from raise_eval.settings import SettingsError

    with pytest.raises(ValueError, match="products='tf32-split' needs a float32 model on a CUDA device"):
        BinaryGibbsProgram(BoltzmannPath(tiny_rbm.to(dtype=torch.float32)), products="tf32-split")
    with pytest.raises(SettingsError, match="gpu_products tf32-split has nothing to compute in a run on cpu"):
        _check_gpu_products(EvaluateSettings(gpu_products="tf32-split"), tiny_rbm.to(dtype=torch.float32))


def test_half_split_products_where_nothing_would_use_them_are_refused_naming_the_setting(tiny_rbm):
    from raise_eval.evaluation.plan import _check_gpu_products
    from raise_eval.evaluation.settings import EvaluateSettings
    from raise_eval.settings import SettingsError

    with pytest.raises(SettingsError, match="gpu_products half-split has nothing to compute in a run on cpu"):
        _check_gpu_products(EvaluateSettings(gpu_products="half-split"), tiny_rbm.to(dtype=torch.float32))
    _check_gpu_products(EvaluateSettings(), tiny_rbm)  # the default computes in the model's dtype anywhere


def test_graphs_never_span_a_step_that_must_be_reported():
    from raise_eval.step_programs import _graph_fits

    assert _graph_fits(0, 4, 10, []) and not _graph_fits(7, 4, 10, [])
    assert not _graph_fits(0, 4, 10, [2]) and _graph_fits(0, 4, 10, [4]) and _graph_fits(0, 4, 10, [0, 9])
    assert _graph_fits(2, 4, 10, [2, 6]) and not _graph_fits(3, 4, 10, [2, 6])


def test_the_ladder_reads_every_rung_through_a_program(tiny_rbm):
    """`ladder_pass` needs the log-weights after given steps: under a step program they are reported there."""
    from raise_eval.estimators.ladder import ladder_pass

    path = BoltzmannPath(tiny_rbm)
    betas = linear_schedule(9)
    with loop_options(programs="always"):
        result = ladder_pass(path, betas, 50_000, rungs=[3, 6], generator=_gen(12))
    for r, index in enumerate(result.rungs[1:], start=1):  # (rung 0 is the base's exact log Z)
        truth = exact.log_partition(path.at(float(betas[index])))
        assert_unbiased(result.log_weights[r], truth)


@pytest.mark.parametrize("k", [1, 3])
def test_float32_models_are_unbiased_too(tiny_rbm, tiny_dbm, k):
    """The float32 arithmetic of the program (betas rounded to float32 in the logits, mixed-dtype products with the
    float64 log-weights): AIS and RAISE of float32 models against the exact answers of the same float32 models."""
    betas = linear_schedule(k)
    for model in (tiny_rbm.to(dtype=torch.float32), tiny_dbm.to(dtype=torch.float32)):
        path = BoltzmannPath(model)
        v = exact.binary_configurations(model.n_visible)[[0, 5, -3, -1]].float()
        with loop_options(programs="always", fuse="fused"):
            result = ais(path, betas, CHAINS, generator=_gen(30 + k))
            raised = raise_log_likelihood(path, v, betas, CHAINS, generator=_gen(40 + k))
        assert result.log_weights.dtype == torch.float64
        assert_unbiased(result.log_weights, exact.log_partition(model))
        p_ann = exact.annealing_model_marginal(model, path.base_biases, betas)
        assert_unbiased(raised.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


def test_given_log_weights_are_added_to_even_when_not_contiguous(tiny_rbm):
    path = BoltzmannPath(tiny_rbm)
    start = path.sample_initial(10, _gen(13))
    given = torch.ones(10, 2, dtype=torch.float64)[:, 0]  # a strided view (10,)
    assert not given.is_contiguous()
    with loop_options(programs="always"):
        _, plain = anneal(path, start, linear_schedule(4), generator=_gen(14))
        _, added = anneal(path, start, linear_schedule(4), generator=_gen(14), log_weights=given)
    assert added is given and torch.allclose(given, plain + 1.0, rtol=0, atol=1e-12)


def test_auto_fusion_is_decided_by_the_whole_run_so_a_continued_run_fuses_alike(tiny_rbm, monkeypatch):
    from raise_eval import step_programs

    seen = []
    monkeypatch.setattr(step_programs, "FUSE_MIN_CHAIN_STEPS", 100)
    original = step_programs.LoopOptions.fuse_for
    def fuse_for(self, device, chain_steps):
        seen.append(chain_steps)
        return original(self, device, chain_steps)

    monkeypatch.setattr(step_programs.LoopOptions, "fuse_for", fuse_for)
    path = BoltzmannPath(tiny_rbm)
    start = path.sample_initial(10, _gen(15))
    with loop_options(programs="always", fuse="auto"):
        _, log_w = anneal(path, start, linear_schedule(12), generator=_gen(16))
        anneal(path, start, linear_schedule(12), generator=_gen(16), log_weights=log_w.clone(), start_step=9)
    assert seen == [120, 120]


# --------------------------------------------------------------------------------------- surrogate weights
# The half and TF32 paths (products='half-path', 'tf32-path') anneal the model with its weights rounded, W~, and keep
# the path's ends at beta = 1 the model's own. Off CUDA the same code runs with any surrogate weights in the model's
# dtype; these tests take W~ = W / 2, far from W, so that a missing or misplaced end link moves log Z by nats.


def _surrogate(model):
    return [w / 2 for w in model.weights]


def _surrogate_model(model):
    from raise_eval.models import LayeredBoltzmannMachine

    return LayeredBoltzmannMachine(_surrogate(model), model.biases, model.weight_scale)


def _surrogate_program(path):
    return lambda options: BinaryGibbsProgram(path, surrogate=_surrogate(path.model))


@pytest.mark.parametrize("betas", [(0.0, 1.0), (1.0, 0.3), (0.2, 0.7), (1.0, 1.0)], ids=str)
def test_a_surrogate_step_is_the_surrogates_and_the_ends_at_one_are_the_models(tiny_rbm, tiny_dbm, betas):
    """One step's log-weight is the surrogate path's log-density ratio, plus log f_1(x) - log f~_1(x) of the last
    state where the run ends at beta = 1, minus that of the first where it starts there (the links to and from the
    model's own distribution), to float64 rounding; the state handed out carries the model's odd inputs."""
    for model, clamped in ((tiny_rbm, ()), (tiny_dbm, ()), (tiny_dbm, (0,))):
        path = BoltzmannPath(model, clamped=clamped)
        twin = BoltzmannPath(_surrogate_model(model), path.base_biases, clamped)
        start = path.sample_initial(500, _gen(1))
        program = BinaryGibbsProgram(path, surrogate=_surrogate(model))
        program.begin(start, None, betas[0], 1)
        program.step(*(torch.tensor(b, dtype=torch.float64) for b in betas), _gen(2))
        after = program.state(betas[1])
        log_w = program.finish(betas[1])

        def gap(state, path=path, twin=twin):  # log f_1(x) - log f~_1(x): with one base, the ratios from 0 differ by it
            exact_state, twin_state = path.state_from_layers(state.layers), twin.state_from_layers(state.layers)
            return path.log_density_ratio(exact_state, 0.0, 1.0) - twin.log_density_ratio(twin_state, 0.0, 1.0)

        expected = twin.log_density_ratio(twin.state_from_layers(after.layers), *betas)
        expected = expected - gap(start) * (betas[0] == 1.0) + gap(after) * (betas[1] == 1.0)
        assert float(gap(after).abs().max()) > 0.1  # the surrogate is far from the model
        assert torch.allclose(log_w, expected, rtol=0, atol=1e-9)
        model_state = path.state_from_layers(after.layers)
        for l in range(1, model.num_layers, 2):
            assert torch.allclose(after.odd_inputs[l], model_state.odd_inputs[l], rtol=0, atol=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_ais_on_a_surrogate_path_is_unbiased_for_the_models_log_z(tiny_rbm, tiny_dbm, train_vectors, k, monkeypatch):
    """AIS whose chains anneal W~ = W / 2 estimates the model's Z without bias (its last link is to the model's
    own distribution); RAISE from the model's states is unbiased for the surrogate path's annealing model (its first
    link from the model's distribution cancels log f(v) - log f~(v)), whose limit is the surrogate's likelihood."""
    from raise_eval import data_base_rates

    betas = linear_schedule(k)
    rbm_path = BoltzmannPath(tiny_rbm, data_base_rates(tiny_rbm, train_vectors))
    for path, seed in ((rbm_path, 50), (BoltzmannPath(tiny_dbm), 60)):
        monkeypatch.setattr(path, "step_program", _surrogate_program(path))
        model, twin = path.model, _surrogate_model(path.model)
        v = exact.binary_configurations(model.n_visible)[[0, 5, -3, -1]]
        with loop_options(programs="always"):
            result = ais(path, betas, CHAINS, generator=_gen(seed + k))
            raised = raise_log_likelihood(path, v, betas, CHAINS, generator=_gen(seed + 5 + k))
        assert abs(exact.log_partition(model) - exact.log_partition(twin)) > 0.15  # many standard errors
        assert_unbiased(result.log_weights, exact.log_partition(model))
        p_ann = exact.annealing_model_marginal(twin, path.base_biases, betas)
        assert_unbiased(raised.log_weights, torch.log(p_ann[exact.configuration_index(v)]))


def test_a_continued_surrogate_run_is_the_uninterrupted_one(tiny_dbm):
    """Saved after step 5 of 12, or after its last step (a run continued at its end), and continued: the same
    log-weights, bit for bit (the link from the model's distribution is taken at a run's step 0 only)."""
    path = BoltzmannPath(tiny_dbm)
    path.step_program = _surrogate_program(path)
    start = path.sample_initial(300, _gen(5))
    for betas in (linear_schedule(12), linear_schedule(12).flip(0)):
        saved = {}

        gen = _gen(1)

        def keep(step, state, log_weights, saved=saved, gen=gen):
            if step in (5, 12):
                saved[step] = (path.clone_state(state), log_weights.clone(), gen.get_state())

        with loop_options(programs="always"):
            _, whole = anneal(path, start, betas, generator=gen, on_step=keep)
            for step in (5, 12):
                state, log_weights, generator_state = saved[step]
                gen.set_state(generator_state)
                _, continued = anneal(path, state, betas, generator=gen, log_weights=log_weights, start_step=step)
                assert torch.equal(continued, whole)


def test_surrogate_weights_are_refused_with_other_products_or_other_shapes(tiny_rbm):
    path = BoltzmannPath(tiny_rbm)
    with pytest.raises(ValueError, match="surrogate weights multiply in the model's dtype"):
        BinaryGibbsProgram(path, products="half-split", surrogate=_surrogate(tiny_rbm))
    with pytest.raises(ValueError, match="shaped like the model's"):
        BinaryGibbsProgram(path, surrogate=[w.t() for w in tiny_rbm.weights])
    for products in ("half-path", "tf32-path"):
        with pytest.raises(ValueError, match=f"products='{products}' needs a float32 model on a CUDA device"):
            BinaryGibbsProgram(BoltzmannPath(tiny_rbm.to(dtype=torch.float32)), products=products)


def test_the_half_path_refuses_weights_float16_cannot_hold():
    from raise_eval.kernels.split_products import half_path_weights

    w = torch.tensor([[1.0, -70000.0]])
    with pytest.raises(ValueError, match="the largest |W| is 7e\\+04, float16 stops at 65504"):
        half_path_weights(w)
    assert half_path_weights(torch.tensor([[1.0, 65504.0]])).dtype == torch.float16
