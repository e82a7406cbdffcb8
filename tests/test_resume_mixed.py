"""--resume-file with machines of typed layers: a run that crashed inside a shard (AIS, a DBM's heating, RAISE)
continues from its saved annealing state with the bits of an uninterrupted run; shards of other sizes give other
numbers only through their own streams."""

import pytest
import torch

from raise_eval import MixedPath, evaluate
from tests.mixed_models import exact_visible_samples, tiny_dbm, tiny_pair

STEPS = 8
RUN = dict(steps=STEPS, ais_chains=30, raise_examples=5, raise_chains=4, init="uniform", seed=3)


def _crash_at(monkeypatch, number: int) -> list:
    real, calls = MixedPath.transition_, []

    def counted(self, state, beta, generator):
        if len(calls) == number:
            calls.append("crash")
            raise RuntimeError("simulated crash")
        calls.append(beta)
        return real(self, state, beta, generator)

    monkeypatch.setattr(MixedPath, "transition_", counted)
    return calls


@pytest.mark.parametrize(
    "kind, number",
    [("gaussian-categorical", 3), ("gaussian-categorical", STEPS + 2), ("dbm", STEPS + 3), ("dbm", 2 * STEPS + 5)],
)
def test_a_crashed_shard_continues_with_the_same_bits(tmp_path, monkeypatch, kind, number):
    model = tiny_dbm() if kind == "dbm" else tiny_pair("gaussian", "categorical")
    model = model.to(dtype=torch.float32)
    if kind == "dbm":
        lv = model.layers[0]
        test = lv.configurations(0, lv.num_configurations).float()
    else:
        test = exact_visible_samples(model.to(dtype=torch.float64), 12, torch.Generator().manual_seed(0)).float()
    whole = evaluate(model, test, **RUN)
    file = tmp_path / "run.pt"
    with monkeypatch.context() as m:
        _crash_at(m, number)
        with pytest.raises(RuntimeError, match="simulated crash"):
            evaluate(model, test, **RUN, resume_file=str(file), resume_interval=0.0)
    resumed = evaluate(model, test, **RUN, resume_file=str(file), resume_interval=0.0)
    assert torch.equal(resumed.ais.log_weights, whole.ais.log_weights)
    assert torch.equal(resumed.raise_.log_weights, whole.raise_.log_weights)
    assert any("continued from step" in note for note in resumed.notes), resumed.notes


def test_shards_run_one_at_a_time_give_the_numbers_of_their_streams(tmp_path):
    model = tiny_pair("spin", "categorical").to(dtype=torch.float32)
    test = exact_visible_samples(model.to(dtype=torch.float64), 10, torch.Generator().manual_seed(0)).float()
    one = evaluate(model, test, **RUN, shard_size=10)
    again = evaluate(model, test, **RUN, shard_size=10, max_memory=10**9)
    assert torch.equal(one.ais.log_weights, again.ais.log_weights)
    assert one.exact_mean is not None and abs(one.ais_mean - one.exact_mean) < 1.0
