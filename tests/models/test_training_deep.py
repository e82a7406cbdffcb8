"""Training DBMs and DBNs on a tiny synthetic data set: shapes, determinism, the RBM -> DBN/DBM mappings, and that
joint DBM training raises the exact log-likelihood."""

import itertools

import pytest
import torch
from raise_eval.models import DBM, DBN, RBM
from raise_eval.models.sampling import sample_bernoulli_probs
from raise_eval.models.training.dbm import (
    DBMTrainingConfig,
    centered_gradients,
    dbm_from_pretrained,
    pretrain_dbm,
    train_dbm,
    train_dbm_joint,
    train_doubled_rbm,
)
from raise_eval.models.training.dbn import DBNTrainingConfig, train_dbn
from raise_eval.models.training.rbm import RBMTrainingConfig, train_rbm


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Tiny matrices: threads only add synchronization (and stall badly on a busy machine).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def data():
    """200 noisy copies (5% flipped bits) of 4 random 8-bit prototypes."""
    g = torch.Generator().manual_seed(0)
    protos = (torch.rand(4, 8, generator=g) < 0.5).float()
    x = protos[torch.randint(0, 4, (200,), generator=g)]
    return (x + (torch.rand(x.shape, generator=g) < 0.05).float()) % 2


def small_dbm_config(hidden=(6, 4), **kw):
    base = dict(
        hidden=list(hidden),
        pretrain_epochs=10,
        pretrain_batch_size=20,
        epochs=5,
        batch_size=20,
        num_chains=20,
        learning_rate=0.02,
        mean_field_iterations=5,
        gibbs_steps=2,
    )
    return DBMTrainingConfig(**{**base, **kw})


def params(model):
    ts = list(model.weights) + list(model.biases)
    return ts + list(getattr(model, "recognition_biases", []))


@pytest.mark.parametrize("hidden", [(6, 4), (6, 5, 4)])
def test_dbm_shapes_finite_and_deterministic(data, hidden):
    config = small_dbm_config(hidden)
    report = {}
    a = train_dbm(data, config, generator=torch.Generator().manual_seed(1), report=report)
    b = train_dbm(data, config, generator=torch.Generator().manual_seed(1))
    c = train_dbm(data, config, generator=torch.Generator().manual_seed(2))
    assert isinstance(a, DBM) and a.layer_sizes == (8, *hidden) and a.dtype == torch.float32
    assert all(bool(torch.isfinite(t).all()) for t in params(a))
    assert all(torch.equal(x, y) for x, y in zip(params(a), params(b)))
    assert not torch.equal(a.weights[0], c.weights[0])
    layers = report["pretraining"]["layers"]
    # bottom RBM: visible input doubled; top RBM: hidden input doubled; middle RBMs: both
    assert [(r["up"], r["down"]) for r in layers] == [(2.0, 1.0)] + [(2.0, 2.0)] * (len(hidden) - 2) + [(1.0, 2.0)]
    assert report["joint"]["epochs_completed"] == config.epochs and not report["budget_exhausted"]
    assert len(report["joint"]["mean_field_bound"]) == config.epochs


def test_doubled_rbm_without_doubling_is_train_rbm(data):
    config = RBMTrainingConfig(n_hidden=5, epochs=3, batch_size=20, method="pcd", gibbs_steps=2)
    expected = train_rbm(data, config, generator=torch.Generator().manual_seed(3))
    got, _ = train_doubled_rbm(data, config, 1.0, 1.0, generator=torch.Generator().manual_seed(3))
    for x, y in zip(params(expected), params(got)):
        assert torch.equal(x, y)


def test_dbm_composition(data):
    config = small_dbm_config((6, 5, 4), epochs=0)
    g = torch.Generator().manual_seed(4)
    rbms = []
    x = data
    for l, (up, down) in enumerate([(2.0, 1.0), (2.0, 2.0), (1.0, 2.0)]):
        rbm, _ = train_doubled_rbm(x, config.pretrain_config(config.hidden[l]), up, down, generator=g)
        rbms.append(rbm)
        x = torch.sigmoid(up * (x @ rbm.W) + rbm.hbias)  # doubled-input recognition probabilities
    composed = pretrain_dbm(data, config, generator=torch.Generator().manual_seed(4))
    assert all(torch.allclose(w, r.W, atol=1e-6) for w, r in zip(composed.weights, rbms))
    assert torch.allclose(composed.biases[0], rbms[0].vbias)
    for l in (1, 2):  # layers shared by two RBMs: the average of the two biases
        assert torch.allclose(composed.biases[l], (rbms[l - 1].hbias + rbms[l].vbias) / 2, atol=1e-6)
    assert torch.allclose(composed.biases[3], rbms[2].hbias, atol=1e-6)
    again = dbm_from_pretrained(rbms)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(params(composed), params(again)))


def exact_log_likelihood(model: DBM, data: torch.Tensor) -> float:
    """Average exact log p(v) of a 3-layer DBM by enumerating v and h2 (h1 summed out analytically)."""
    m = model.to(dtype=torch.float64)

    def states(n):
        return torch.tensor(list(itertools.product([0.0, 1.0], repeat=n)), dtype=torch.float64)

    vs, h2s = states(m.layer_sizes[0]), states(m.layer_sizes[2])
    grid = m.log_unnormalized_marginal([vs[:, None, :].expand(-1, len(h2s), -1), None, h2s.expand(len(vs), -1, -1)])
    log_z = torch.logsumexp(grid.flatten(), 0)
    d = data.double()
    log_f = torch.logsumexp(
        m.log_unnormalized_marginal([d[:, None, :].expand(-1, len(h2s), -1), None, h2s.expand(len(d), -1, -1)]), 1
    )
    return float((log_f - log_z).mean())


def test_joint_training_raises_the_exact_likelihood(data):
    config = small_dbm_config(epochs=30, learning_rate=0.05, final_learning_rate_fraction=0.2)
    g = torch.Generator().manual_seed(5)
    pretrained = pretrain_dbm(data, config, generator=g)
    trained = train_dbm_joint(data, pretrained, config, generator=g)
    before, after = exact_log_likelihood(pretrained, data), exact_log_likelihood(trained, data)
    assert after > before + 0.3, (before, after)


def test_centered_gradient_is_the_plain_step_of_a_centered_gradient_step():
    """The centered gradient in the plain parameters equals J dtheta_c, where dtheta_c = J^T g is the autograd
    gradient in the centered parameters (W, a) of the plain objective whose plain gradient g is the moment
    difference, and J the Jacobian of (W, a) -> (W, b = a - W o_next - W_prev^T o_prev)."""
    g = torch.Generator().manual_seed(0)
    sizes = [5, 4, 3, 2]
    data_layers = [torch.rand(7, n, generator=g, dtype=torch.float64) for n in sizes]
    model_layers = [(torch.rand(9, n, generator=g, dtype=torch.float64) < 0.5).double() for n in sizes]
    offsets = [torch.rand(n, generator=g, dtype=torch.float64) for n in sizes]
    weights = [torch.randn(a, b, generator=g, dtype=torch.float64) for a, b in zip(sizes, sizes[1:])]
    centered_biases = [torch.randn(n, generator=g, dtype=torch.float64) for n in sizes]

    def plain_biases(ws, a):
        return [
            a[l]
            - (ws[l] @ offsets[l + 1] if l < len(ws) else 0)
            - (offsets[l - 1] @ ws[l - 1] if l > 0 else 0)
            for l in range(len(a))
        ]

    def objective(ws, a):
        # Its plain gradient is the data-minus-model moment difference (the log-likelihood gradient's form).
        bs = plain_biases(ws, a)
        total = 0
        for layers, sign in ((data_layers, 1), (model_layers, -1)):
            pairs = sum(((x.t() @ y) * w).sum() / len(x) for x, y, w in zip(layers, layers[1:], ws))
            total = total + sign * (pairs + sum((x.mean(0) * b).sum() for x, b in zip(layers, bs)))
        return total

    ws = [w.clone().requires_grad_(True) for w in weights]
    a = [b.clone().requires_grad_(True) for b in centered_biases]
    grads = torch.autograd.grad(objective(ws, a), ws + a)
    step_w, step_a = list(grads[: len(ws)]), list(grads[len(ws) :])
    expected = step_w + plain_biases(step_w, step_a)  # J is linear: the plain step of the centered step
    got = centered_gradients(data_layers, model_layers, weights, offsets, weight_decay=0.0)
    assert len(got) == len(expected)
    for x, y in zip(got, expected):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


def test_centered_joint_training_raises_the_exact_likelihood(data):
    config = small_dbm_config(epochs=30, learning_rate=0.05, final_learning_rate_fraction=0.2, centering=True)
    g = torch.Generator().manual_seed(5)
    pretrained = pretrain_dbm(data, config, generator=g)
    trained = train_dbm_joint(data, pretrained, config, generator=g)
    before, after = exact_log_likelihood(pretrained, data), exact_log_likelihood(trained, data)
    assert after > before + 0.3, (before, after)
    with pytest.raises(ValueError, match="offset_rate"):
        train_dbm_joint(data, pretrained, small_dbm_config(centering=True, offset_rate=0.0), generator=g)


def test_budget_stops_cleanly(data):
    report = {}
    model = train_dbm(
        data, small_dbm_config(), generator=torch.Generator().manual_seed(6), max_seconds=0.0, report=report
    )
    assert isinstance(model, DBM) and report["budget_exhausted"]
    assert report["joint"]["stopped_by_budget"] and report["joint"]["epochs_completed"] < 1
    report = {}
    dbn = train_dbn(
        data,
        DBNTrainingConfig(hidden=[6, 4], epochs=5, batch_size=20),
        generator=torch.Generator().manual_seed(6),
        max_seconds=0.0,
        report=report,
    )
    assert isinstance(dbn, DBN) and report["budget_exhausted"]
    assert [r["epochs_completed"] for r in report["layers"]] == [1, 1]


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_dbm_training_refuses_a_budget_that_is_not_a_finite_number_of_seconds(data, bad):
    """As train_dbn does: a negative, NaN or infinite max_seconds is refused naming the field, before any training
    (it used to train one epoch per layer and report the budget exhausted)."""
    for train in (train_dbm, pretrain_dbm):
        with pytest.raises(ValueError, match="max_seconds must be a finite number of seconds, 0 or more"):
            train(data, small_dbm_config(), generator=torch.Generator().manual_seed(6), max_seconds=bad)
    with pytest.raises(ValueError, match="pretrain_budget_fraction must be between 0 and 1"):
        train_dbm(data, small_dbm_config(pretrain_budget_fraction=bad), generator=torch.Generator().manual_seed(6))


def test_a_dbn_budget_is_split_by_timed_epochs_and_leaves_the_training_alone(data, monkeypatch):
    import raise_eval.models.training.dbn as dbn_training

    config = DBNTrainingConfig(hidden=[6, 4], epochs=3, batch_size=20)
    plain = train_dbn(data, config, generator=torch.Generator().manual_seed(8))
    report = {}
    budgeted = train_dbn(data, config, generator=torch.Generator().manual_seed(8), max_seconds=600.0, report=report)
    # the timing draws from a generator of its own: a budget that is not reached changes no bit of the model
    assert all(torch.equal(a, b) for a, b in zip(plain.weights + plain.biases, budgeted.weights + budgeted.biases))
    assert [r["epochs_completed"] for r in report["layers"]] == [3, 3] and not report["budget_exhausted"]
    assert all(r["timed_epoch_seconds"] > 0 for r in report["layers"])
    # the deadlines are cut in proportion to the timed epochs (not the weight counts, 6 * n_visible and 24)
    split = []
    widths = {data.shape[1]: 3.0, 6: 1.0}
    monkeypatch.setattr(dbn_training, "layer_epoch_seconds", lambda rows, n_in, n_out, cfg, like: widths[n_in])
    monkeypatch.setattr(
        dbn_training, "layer_deadlines", lambda start, seconds, costs: split.append(costs) or [None] * 2
    )
    train_dbn(data, config, generator=torch.Generator().manual_seed(8), max_seconds=600.0)
    assert split == [[3.0, 1.0]]
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="max_seconds must be a finite number of seconds, 0 or more"):
            train_dbn(data, config, generator=torch.Generator().manual_seed(8), max_seconds=bad)


@pytest.mark.parametrize("propagate", ["probs", "samples"])
def test_dbn_is_the_greedy_rbm_stack(data, propagate):
    config = DBNTrainingConfig(hidden=[6, 5, 4], epochs=4, batch_size=20, method="cd", propagate=propagate)
    report = {}
    dbn = train_dbn(data, config, generator=torch.Generator().manual_seed(7), report=report)
    # The same stack by hand, with the same sequence of random draws.
    g = torch.Generator().manual_seed(7)
    rbms, x = [], data
    for n_hidden in config.hidden:
        rbm = train_rbm(x, config.rbm_config(n_hidden), generator=g)
        rbms.append(rbm)
        if len(rbms) < len(config.hidden):
            p = rbm.hidden_probs(x)
            x = p if propagate == "probs" else sample_bernoulli_probs(p, g)
    assert isinstance(dbn, DBN) and dbn.layer_sizes == (8, 6, 5, 4)
    assert all(bool(torch.isfinite(t).all()) for t in params(dbn))
    for l, rbm in enumerate(rbms):
        assert torch.equal(dbn.weights[l], rbm.W)  # directed weights and the top RBM's weights
        assert torch.equal(dbn.biases[l], rbm.vbias)  # generative biases; biases[L-1] is the top RBM's visible bias
    assert torch.equal(dbn.biases[3], rbms[2].hbias)  # the top layer
    assert torch.equal(dbn.recognition_biases[0], rbms[0].hbias)  # q(x_1 | v)
    assert torch.equal(dbn.recognition_biases[1], rbms[1].hbias)  # q(x_2 | x_1)
    top = dbn.top
    assert isinstance(top, RBM) and torch.equal(top.W, rbms[2].W) and torch.equal(top.vbias, rbms[2].vbias)
    assert torch.equal(top.hbias, rbms[2].hbias)
    again = train_dbn(data, config, generator=torch.Generator().manual_seed(7))
    assert all(torch.equal(a, b) for a, b in zip(params(dbn), params(again)))
    assert [r["epochs_completed"] for r in report["layers"]] == [4, 4, 4]


def test_configs_refuse_one_hidden_layer(data):
    with pytest.raises(ValueError, match="at least two hidden layers"):
        train_dbm(data, small_dbm_config((6,)), generator=torch.Generator())
    with pytest.raises(ValueError, match="at least two hidden layers"):
        train_dbn(data, DBNTrainingConfig(hidden=[6]), generator=torch.Generator())
