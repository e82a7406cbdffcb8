"""The plain-PyTorch VAE script and the example factories that wrap its state_dict: the wrapped model computes
exactly what the training code computes (decoder likelihood and encoder, log-variance convention included)."""

from __future__ import annotations

import pytest
import torch

from raise_eval.models import DecoderModel
from raise_eval.io.user_model import load_module
from tests.conftest import PROJECT_ROOT
from tests.scripts.test_reproduce_raise_tables import load_script


@pytest.mark.parametrize(
    "likelihood, factory", [("bernoulli", "plain_vae_factory.py"), ("gaussian", "gaussian_vae_factory.py")]
)
def test_the_factory_rebuilds_what_the_script_trained(shared_data, tmp_path, likelihood, factory, capsys):
    script = load_script("train_vae_plain")
    out = tmp_path / "vae.pt"
    args = ["--likelihood", likelihood, "--epochs", "1", "--train-size", "300", "--data-root", str(shared_data)]
    script.main([*args, "--out", str(out)])
    assert f"wrote {out}" in capsys.readouterr().out
    state = torch.load(out, weights_only=True)
    extra = {"log_scale"} if likelihood == "gaussian" else set()
    assert {k.split(".")[0] for k in state} == {"encoder", "decoder"} | extra
    module = load_module(PROJECT_ROOT / "examples" / factory)
    module.CHECKPOINT = out
    model = module.make_model()
    assert isinstance(model, DecoderModel) and (model.latent_dim, model.data_dim) == (50, 784)
    trained = script.PlainVAE(likelihood)
    trained.load_state_dict(state)
    trained.eval()
    g = torch.Generator().manual_seed(0)
    x = torch.rand(5, 784, generator=g)
    if likelihood == "bernoulli":
        x = (x < 0.3).float()
    z = torch.randn(5, 50, generator=g)
    with torch.no_grad():
        torch.testing.assert_close(model.log_likelihood(x, z), trained.log_px_given_z(x, z))
        mu, logvar = trained.encoder(x).chunk(2, dim=-1)
        mean, log_std = model.encode(x)
    torch.testing.assert_close(mean, mu)
    torch.testing.assert_close(log_std, 0.5 * logvar)
