"""The energy report's data row names the default base that was used, not a list of all three."""

import torch
from raise_eval.models import categorical

import raise_eval


def _report(support, event_shape, test):
    model = raise_eval.EnergyModel(lambda x: 0.5 * (x.float() ** 2).sum(tuple(range(1, x.dim()))), support=support,
                                   event_shape=event_shape)  # fmt: skip
    tuned = {} if model.support.discrete else {"pilot_steps": 5}  # the discrete kernels have no step-size pilot
    return raise_eval.evaluate(model, test, steps=5, ais_chains=4, raise_chains=2, progress=False, **tuned)


def test_the_data_row_names_the_default_base_of_the_support():
    g = torch.Generator().manual_seed(0)
    cases = [("real", (2,), torch.randn(3, 2, generator=g), "N(0, 1) per coordinate"),
             (("real", 0.0, 1.0), (2,), torch.rand(3, 2, generator=g),
              "a Gaussian centred in the box [0, 1], its width as std, truncated to it"),
             ("binary", (3,), torch.randint(0, 2, (3, 3), generator=g).float(), "uniform sites"),
             (categorical(3), (2,), torch.randint(0, 3, (3, 2), generator=g), "uniform sites")]  # fmt: skip
    for support, event_shape, test, words in cases:
        report = _report(support, event_shape, test)
        row = next(line for line in report.format_table().splitlines() if line.startswith("data"))
        assert row.endswith(f"; the default base ({words})"), row
        assert report.to_dict()["data"]["default_base"] == words
