"""Conformance of every model family to the declared contracts (raise_eval.contracts, raise_eval.models.contracts):
the models declare their family by class, their paths offer every member the estimators use, their chain states
what a resume file keeps, and the kernels the transition (and info) contract."""

from __future__ import annotations

import pytest
import torch
from raise_eval.models import DBM, DBN, RBM, LayeredBoltzmannMachine
from raise_eval.models.contracts import FAMILIES, BoltzmannModel, DirectedModel, Model, declared_family
from raise_eval.models.directed.linear_gaussian import LinearGaussianModel
from raise_eval.models.directed.sbn import SigmoidBeliefNet
from raise_eval.models.directed.vae import VAE, VAEConfig

from raise_eval import contracts
from raise_eval.annealing import anneal
from raise_eval.kernels.hmc import HMCKernel
from raise_eval.paths.boltzmann import make_path
from raise_eval.paths.directed import DirectedPath
from raise_eval.paths.posterior import DBMPosteriorPath, DBNPosteriorPath
from raise_eval.runtime.resume import model_digest, tensor_digest
from tests.energy_models import gaussian_energy, neural_energy
from tests.fully_visible_models import random_model
from tests.mixed_models import tiny_dbm, tiny_pair


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def boltzmann_models():
    """(name, model, expected family) for every undirected family: binary and typed, two layers and more."""
    chain = LayeredBoltzmannMachine(
        [
            torch.randn(5, 4, generator=_g(1), dtype=torch.float64),
            torch.randn(4, 3, generator=_g(2), dtype=torch.float64),
        ],
        [torch.zeros(5, dtype=torch.float64), torch.zeros(4, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)],
    )
    return [
        ("RBM", RBM.random(6, 4, generator=_g(), dtype=torch.float64), "RBM"),
        ("DBM", DBM.random([6, 4, 3], generator=_g(), dtype=torch.float64), "DBM"),
        ("binary chain of 3", chain, "DBM"),
        ("typed RBM", tiny_pair("categorical", "bernoulli"), "RBM"),
        ("Gaussian RBM", tiny_pair("gaussian", "bernoulli"), "RBM"),
        ("typed DBM", tiny_dbm(), "DBM"),
    ]


def all_models():
    out = [(name, model, family) for name, model, family in boltzmann_models()]
    out.append(("DBN", DBN.random([6, 4, 3], generator=_g(), dtype=torch.float64), "DBN"))
    out.append(("SBN", SigmoidBeliefNet.random(6, 3, generator=_g()), "directed"))
    out.append(("linear Gaussian", LinearGaussianModel.random(4, 2, generator=_g()), "directed"))
    torch.manual_seed(0)  # nn.Linear's own initialization (a test, not library code)
    out.append(("VAE", VAE(VAEConfig(data_dim=6, latent_dim=2, hidden=[5])), "directed"))
    out += [(f"fully visible {name}", model, "fully-visible") for name, model in fully_visible_models()]
    out += [(f"energy {name}", model, "energy") for name, model in energy_models()]
    return out


def energy_models():
    """(name, model) for every support of the 'energy' family."""
    from raise_eval.models import EnergyModel, categorical

    box = EnergyModel(lambda x: ((x - 0.3) ** 2).sum(-1), ("real", 0.0, 1.0), (2,), dtype=torch.float64)
    out = [(kind, neural_energy(kind, 3)) for kind in ("binary", "spin")]
    out.append(("categorical", neural_energy("categorical", 3, q=3)))
    out += [("real", gaussian_energy(2)[0]), ("real box", box)]
    assert {m.support.describe() for _, m in out} == {"binary", "spin", str(categorical(3).describe()), "real",
                                                      "real[0, 1]"}  # fmt: skip
    return out


def fully_visible_models():
    """(name, model) for every kind of site of the 'fully-visible' family."""
    return [(sites, random_model(sites, 3, 3)) for sites in ("categorical", "spin", "bernoulli")]


def directed_models():
    """(name, model) for every directed model class, a user's decoder (DecoderModel) among them."""
    from raise_eval.models import DecoderModel

    return [(name, model) for name, model, family in all_models() if family == "directed"] + [
        ("decoder", DecoderModel(lambda z: z.sum(-1, keepdim=True).expand(-1, 3), latent_dim=2)),
    ]


@pytest.mark.parametrize("name, model", directed_models(), ids=[m[0] for m in directed_models()])
def test_directed_models_conform_and_their_optional_members_have_defaults(name, model):
    """What BDMC, AIDE and the directed path ask of a directed model is declared (no hasattr at the call sites):
    its dtype and device, its data support and check, its encoder or None, its closed-form logits or None."""
    assert isinstance(model, DirectedModel) and declared_family(model) == "directed"
    assert model.data_support in ("binary", "declared")
    z, x = model.sample_joint(3, _g(4))
    assert z.dtype == model.dtype and z.device == model.device and x.shape == (3, model.data_dim)
    torch.testing.assert_close(model.check_data(x, "x"), x)
    encoder = model.posterior_approximation()
    assert encoder is None or encoder.log_prob(x, z.unsqueeze(1)).shape == (3, 1)
    logits = model.data_logits(z)
    assert logits is None or logits.shape == (3, model.data_dim)
    assert declared_family(object()) is None


@pytest.mark.parametrize("name, model, family", all_models(), ids=[m[0] for m in all_models()])
def test_every_model_declares_its_family(name, model, family):
    assert isinstance(model, Model)
    assert model.family == family and model.family in FAMILIES
    assert isinstance(model.describe(), str) and model.describe()


def test_the_named_classes_declare_their_family_on_the_class():
    # never derived from a layer count: an RBM, a DBM and a DBN say what they are
    for cls, family in ((RBM, "RBM"), (DBM, "DBM"), (DBN, "DBN")):
        assert vars(cls)["family"] == family


def test_evaluate_refuses_a_model_of_a_family_it_does_not_run():
    from raise_eval.models import FullyVisibleModel

    from raise_eval.evaluation.plan import model_family

    with pytest.raises(TypeError, match="a directed model: use raise-eval bdmc"):
        model_family(SigmoidBeliefNet.random(6, 3, generator=_g()))
    # a fully visible model runs through the same plan: its family is one evaluate runs
    assert model_family(FullyVisibleModel(torch.zeros(3, 2), torch.zeros(3, 2, 3, 2))) == "fully-visible"
    with pytest.raises(TypeError, match="an energy model: raise_eval.evaluate runs it through evaluate_energy"):
        model_family(neural_energy("binary", 3))
    with pytest.raises(TypeError, match=r"an instance of object \(it declares no family\): for a VAE or decoder use"):
        model_family(object())


@pytest.mark.parametrize("name, model, family", boltzmann_models(), ids=[m[0] for m in boltzmann_models()])
def test_boltzmann_models_and_their_paths_conform(name, model, family):
    assert isinstance(model, BoltzmannModel)
    assert model.typed_layers == (name.startswith("typed") or name.startswith("Gaussian"))
    path = make_path(model)
    assert isinstance(path, contracts.GeometricPath)
    assert isinstance(path, contracts.AnnealingPath)
    state = path.sample_initial(3, _g())
    assert isinstance(state, contracts.ChainState)
    # the members work together as the estimators use them
    state, log_w = anneal(path, state, torch.linspace(0, 1, 4, dtype=torch.float64), generator=_g(1))
    assert log_w.shape == (3,) and log_w.dtype == torch.float64 and bool(torch.isfinite(log_w).all())
    assert path.with_clamped((0,)).clamped == (0,)
    assert path.log_base_prob(state.layers[0], 0).shape == (3,)
    # what a resume file keeps of the state, the path rebuilds (the odd probabilities keyed again where valid)
    assert isinstance(path, contracts.ResumableState)
    key = state.probs_key
    record = {"layers": state.layers, "odd_inputs": state.odd_inputs, "odd_probs": None if key is None else
              state.odd_probs, "probs_beta": None if key is None else key[1]}  # fmt: skip
    rebuilt = path.state_from_record(record)
    assert all(a is None and b is None or torch.equal(a, b) for a, b in zip(rebuilt.layers, state.layers))
    assert (rebuilt.probs_key is None) == (key is None)
    # a step program where one is written (binary layers), None elsewhere; none where the options run none
    from raise_eval.step_programs import LoopOptions

    program = path.step_program(LoopOptions(programs="always"))
    assert (program is None) == model.typed_layers
    assert program is None or isinstance(program, contracts.StepProgram)
    assert path.step_program(LoopOptions(programs="never")) is None


@pytest.mark.parametrize("name, model", fully_visible_models(), ids=[m[0] for m in fully_visible_models()])
def test_fully_visible_models_and_their_paths_conform(name, model):
    assert not isinstance(model, BoltzmannModel)  # no layers: its path is chosen by its family
    path = make_path(model)
    assert isinstance(path, contracts.AnnealingPath)
    state = path.sample_initial(3, _g())
    state, log_w = anneal(path, state, torch.linspace(0, 1, 4, dtype=torch.float64), generator=_g(1))
    assert log_w.shape == (3,) and log_w.dtype == torch.float64 and bool(torch.isfinite(log_w).all())
    assert isinstance(path.log_partition_initial, float)
    assert model.to(dtype=torch.float32).dtype == torch.float32 and model.digest_parts()[1] == 1.0
    # what a resume file keeps of the state (its site codes, as its one layer), the path rebuilds; a fresh copy of
    # the path for a pilot or a timing, with no layers to clamp
    assert isinstance(path, contracts.ResumableState)
    rebuilt = path.state_from_record({"layers": (state,), "odd_inputs": (), "odd_probs": None, "probs_beta": None})
    assert torch.equal(rebuilt, state) and rebuilt.dtype == torch.int64
    copy = path.with_clamped(())
    assert copy is not path and copy.clamped == () and torch.equal(copy.base_biases[0], path.base_biases[0])
    with pytest.raises(ValueError, match="no layers to clamp"):
        path.with_clamped((0,))
    # a step program (the site scan and its weight update), none where the options run none
    from raise_eval.step_programs import LoopOptions

    program = path.step_program(LoopOptions(programs="always"))
    assert isinstance(path, contracts.OffersStepProgram) and isinstance(program, contracts.StepProgram)
    assert path.step_program(LoopOptions(programs="never")) is None
    program.begin(state, None, 0.5)
    program.step(*(torch.tensor(b, dtype=torch.float64) for b in (0.5, 0.75)), _g(2))
    assert program.state(0.75).shape == state.shape and program.log_weights.shape == (3,)
    assert program.log_weights.dtype == torch.float64 and program.device == model.device


@pytest.mark.parametrize("name, model", energy_models(), ids=[m[0] for m in energy_models()])
def test_energy_models_and_their_paths_conform(name, model):
    from raise_eval.paths.energy import EnergyPath

    assert not isinstance(model, BoltzmannModel)  # no layers: its path is chosen by its family
    path = make_path(model)
    assert isinstance(path, EnergyPath) and isinstance(path, contracts.AnnealingPath)
    assert isinstance(path.kernel, contracts.InfoKernel)
    state = path.sample_initial(3, _g())
    state, log_w = anneal(path, state, torch.linspace(0, 1, 4, dtype=torch.float64), generator=_g(1))
    assert log_w.shape == (3,) and log_w.dtype == torch.float64 and bool(torch.isfinite(log_w).all())
    assert isinstance(path.log_partition_initial, float) and path.step_program(None) is None
    start, log_f = path.test_vector_start(model.data_from_state(state.x), 2)  # RAISE's start at the test points
    assert start.x.shape[:2] == (3, 2) and torch.equal(log_f, state.log_f)
    assert model.to(dtype=torch.float32).dtype == torch.float32 and model.digest_parts()[1] == 1.0


def test_posterior_paths_conform_and_the_dbn_heating_state_is_what_resume_keeps():
    dbm = DBM.random([6, 4, 3], generator=_g(), dtype=torch.float64)
    dbn = DBN.random([6, 4, 3], generator=_g(), dtype=torch.float64)
    v = torch.randint(0, 2, (2, 6), generator=_g(3)).double()
    dbm_path, dbn_path = DBMPosteriorPath(dbm), DBNPosteriorPath(dbn)
    assert isinstance(dbm_path, contracts.AnnealingPath) and isinstance(dbn_path, contracts.AnnealingPath)
    # a DBN's RAISE heating is saved in resume files: its state is a ChainState; a DBM's posterior path serves the
    # per-vector log f(v) estimates, which resume saves by chunk (no chain state), so it need not be one
    state = dbn_path.start(v, 3, _g())[0]
    assert isinstance(state, contracts.ChainState) and isinstance(dbn_path, contracts.ResumableState)
    rebuilt = dbn_path.state_from_layers(v, dbn_path.state_from_record({"layers": state.layers}))
    assert all(a is None and b is None or torch.equal(a, b) for a, b in zip(rebuilt.layers, state.layers))
    assert not isinstance(dbm_path.start(v, 3, _g())[0], contracts.ChainState)


def test_model_digest_is_the_declared_parameters():
    rbm = RBM.random(6, 4, generator=_g(), dtype=torch.float64)
    dbn = DBN.random([6, 4, 3], generator=_g(), dtype=torch.float64)
    # the digests of 0.3's resume files: weights, biases (and a DBN's recognition biases), then the weight scale
    assert model_digest(rbm) == f"{tensor_digest([*rbm.weights, *rbm.biases])}/1.0"
    assert model_digest(dbn) == f"{tensor_digest([*dbn.weights, *dbn.biases, *dbn.recognition_biases])}/1.0"
    half = rbm.annealed(0.5, [torch.zeros(6, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)])
    assert model_digest(half).endswith("/0.5")


def test_kernels_conform_and_report_their_info_through_anneal():
    model = LinearGaussianModel.random(3, 2, generator=_g())
    _, x = model.sample_joint(2, _g(1))
    path = DirectedPath(model, x)
    kernel = HMCKernel(path, 0.3, num_leapfrog=3)
    assert isinstance(kernel, contracts.TransitionKernel) and isinstance(kernel, contracts.InfoKernel)
    seen = []
    betas = torch.linspace(0, 1, 4, dtype=torch.float64)
    start = path.sample_initial(4, _g(2))
    _, log_w = anneal(path, start, betas, generator=_g(3), kernel=kernel,
                      on_info=lambda step, info: seen.append((step, info["acceptance"])))  # fmt: skip
    assert [s for s, _ in seen] == [1, 2, 3]
    assert all(a.shape == (2, 4) and bool(((a >= 0) & (a <= 1)).all()) for _, a in seen)
    # the info channel changes nothing: the same seed gives the same log-weights without it
    _, plain = anneal(path, start, betas, generator=_g(3), kernel=HMCKernel(path, 0.3, num_leapfrog=3))
    assert torch.equal(log_w, plain)
    with pytest.raises(ValueError, match="InfoKernel"):
        anneal(path, start, betas, generator=_g(), on_info=print)
