"""The training functions' trajectory: snapshot(updates, model) at the start, every N updates and after the last."""

from __future__ import annotations

import pytest
import torch
from raise_eval.models.training.dbm import DBMTrainingConfig, train_dbm
from raise_eval.models.training.rbm import RBMTrainingConfig, train_rbm


def _data(n=60, d=10, seed=0):
    return (torch.rand(n, d, generator=torch.Generator().manual_seed(seed)) < 0.4).float()


def test_rbm_snapshots_and_the_final_model():
    seen = []

    def snapshot(updates, model):
        seen.append((updates, model.W.clone()))

    config = RBMTrainingConfig(n_hidden=3, epochs=3, batch_size=20, learning_rate=0.1, method="cd")
    final = train_rbm(_data(), config, generator=torch.Generator().manual_seed(1), snapshot=snapshot, snapshot_every=4)
    assert [u for u, _ in seen] == [0, 4, 8, 9]  # 3 updates per epoch: the last (9) is no multiple of 4
    assert torch.equal(seen[-1][1], final.W) and seen[0][1].abs().max() < 0.1  # the start: small random weights
    # snapshots change nothing: the same seed gives the same model without them
    plain = train_rbm(_data(), config, generator=torch.Generator().manual_seed(1))
    assert torch.equal(plain.W, final.W)
    with pytest.raises(ValueError, match="snapshot_every"):
        train_rbm(_data(), config, generator=torch.Generator(), snapshot=snapshot)


def test_dbm_snapshots_of_the_joint_training():
    seen = []
    config = DBMTrainingConfig(hidden=[4, 3], pretrain_epochs=1, pretrain_batch_size=20, epochs=2, batch_size=30,
                               num_chains=5, gibbs_steps=1, mean_field_iterations=2)  # fmt: skip
    final = train_dbm(
        _data(), config, generator=torch.Generator().manual_seed(2), snapshot_every=2,
        snapshot=lambda u, m: seen.append((u, [w.clone() for w in m.weights])),
    )  # fmt: skip
    assert [u for u, _ in seen] == [0, 2, 4]
    assert all(torch.equal(a, b) for a, b in zip(seen[-1][1], final.weights))
