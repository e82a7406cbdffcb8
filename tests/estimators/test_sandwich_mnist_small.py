"""AIS and RAISE sandwich the exact answer on a published 196-20 MNIST RBM (exact log Z stored in the file).

Test data: MNIST test images average-pooled 2x2 to 14x14 and thresholded at 0.5 (`mnist14`). Settings: data base
rates, linear schedule, K = 1000, 1000 AIS chains, RAISE on 100 random test images x 10 chains (about 2 s).
Seeds are fixed; at these settings the observed errors are about 0.01 nats, ten times inside the tolerances.
"""

import pytest
import torch
from raise_eval.models.io.checkpoints import load_checkpoint

from raise_eval import BoltzmannPath, ais, data_base_rates, linear_schedule, raise_log_likelihood
from raise_eval.io.datasets import load_dataset

pytestmark = pytest.mark.data


@pytest.fixture(scope="module")
def setup(shared_data):
    ckpt = load_checkpoint(shared_data / "checkpoints" / "rbm_mnist_small_grosse_salakhutdinov_2015.npz")
    train = load_dataset("mnist14", "train", shared_data)
    test = load_dataset("mnist14", "test", shared_data)
    path = BoltzmannPath(ckpt.model, data_base_rates(ckpt.model, train))
    return ckpt, path, test


def test_ais_log_z_within_a_tenth_of_a_nat(setup):
    ckpt, path, _ = setup
    result = ais(path, linear_schedule(1000), 1000, generator=torch.Generator().manual_seed(0))
    assert abs(result.estimate - ckpt.metadata["log_z_exact"]) < 0.1


def test_raise_is_conservative_and_close(setup):
    ckpt, path, test = setup
    log_z = ckpt.metadata["log_z_exact"]
    subset = torch.randperm(len(test), generator=torch.Generator().manual_seed(1))[:100]
    result = raise_log_likelihood(
        path, test[subset], linear_schedule(1000), 10, generator=torch.Generator().manual_seed(2)
    )
    exact_subset = (ckpt.model.log_unnormalized_prob(test[subset]).double() - log_z).mean().item()
    assert exact_subset - 1.0 < result.mean < exact_subset + 0.1
    # extended to the whole test set with the control variate log f(v)
    all_log_f = ckpt.model.log_unnormalized_prob(test).double()
    estimate = result.control_variate_mean(all_log_f).mean
    exact_all = all_log_f.mean().item() - log_z
    assert exact_all - 1.0 < estimate < exact_all + 0.1
