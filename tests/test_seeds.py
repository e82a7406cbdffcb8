"""The seed offsets are declared once (`raise_eval.seeds`) and what the settings' help says agrees with them."""

import re

import pytest

from raise_eval.evaluation.settings import EvaluateSettings
from raise_eval.seeds import ENERGY_OFFSETS, EVALUATION_OFFSETS, TRAJECTORY_OFFSETS, stage_seed
from raise_eval.settings import SEED_RANGE, SettingsError
from raise_eval.trajectory.settings import TrajectorySettings


def _said(doc: str) -> list[int]:
    return [int(n) for n in re.findall(r"`seed \+ (\d)`", " ".join(doc.split()))]


def test_the_settings_docstrings_name_the_registrys_offsets():
    evaluation = ["raise", "log_f", "raise_subset", "pilot", "log_f_check", "test_subset"]
    assert _said(EvaluateSettings.__doc__) == [EVALUATION_OFFSETS[s] for s in evaluation]
    trajectory = ["raise", "bootstrap", "raise_subset", "log_f", "pilot", "test_subset"]
    assert _said(TrajectorySettings.__doc__) == [TRAJECTORY_OFFSETS[s] for s in trajectory]


def test_every_stream_of_the_largest_seed_is_a_torch_seed():
    import torch

    seed = EvaluateSettings(seed=SEED_RANGE[1]).seed
    for offsets in (EVALUATION_OFFSETS, TRAJECTORY_OFFSETS, ENERGY_OFFSETS):  # an energy's: within the bound
        for stage in offsets:
            torch.Generator().manual_seed(stage_seed(seed, stage, offsets))
    with pytest.raises(SettingsError, match="seed"):
        EvaluateSettings(seed=SEED_RANGE[1] + 1)
