"""The seed offsets of the protocols' random streams, declared once: stage `s` of a run seeded `seed` draws from
`seed + OFFSETS[s]`, its own stream, so that no stage's numbers depend on how many random numbers another drew.

The offsets are part of the numbers (changing one changes every result after it), so they never change; a new
stage takes a new offset. `raise_eval.runtime.sharding` derives each shard's seed from its stage's offset.
"""

from __future__ import annotations

# evaluate (and certify, and the training monitor's sandwich): AIS, RAISE, the log f(v) estimates, RAISE's test
# subset, the adaptive schedule's pilot, the log f(v) check's subset, `test_subset`, thermodynamic integration beside
# AIS (fully visible models).
EVALUATION_OFFSETS = {
    "ais": 0, "raise": 1, "log_f": 2, "raise_subset": 3, "pilot": 4, "log_f_check": 5, "test_subset": 6, "ti": 7,
}  # fmt: skip
# the training trajectory's protocol: AIS, RAISE, BAR's bootstrap, RAISE's test subset, the log f(v) estimates of
# checkpoint i (seed + 4 + LOG_F_STRIDE i), the adaptive links' pilot, `test_subset`.
TRAJECTORY_OFFSETS = {
    "ais": 0, "raise": 1, "bootstrap": 2, "raise_subset": 3, "log_f": 4, "pilot": 5, "test_subset": 6,
}  # fmt: skip
TRAJECTORY_LOG_F_STRIDE = 7919  # a prime: checkpoint i's log f(v) stream, apart from the other stages' offsets
# a user's energy model's evaluation (`evaluation.energy`): HMC's step-size pilot, AIS, RAISE, the probe of the
# energy's tails (`evaluation.energy_checks.tail_warning`), the AIS of the probe of a fitted base
# (`evaluation.energy_checks.base_probe_warning`); within LARGEST_OFFSET (the seed's bound), which a test checks.
ENERGY_OFFSETS = {"pilot": 0, "ais": 1, "raise": 2, "tail": 3, "probe": 4}
LARGEST_OFFSET = max(max(EVALUATION_OFFSETS.values()), max(TRAJECTORY_OFFSETS.values()))


def stage_seed(seed: int, stage: str, offsets: dict[str, int] = EVALUATION_OFFSETS) -> int:
    """The seed of `stage`'s stream in a run seeded `seed` (`offsets`: the protocol's registry)."""
    return seed + offsets[stage]


__all__ = [
    "ENERGY_OFFSETS",
    "EVALUATION_OFFSETS",
    "LARGEST_OFFSET",
    "TRAJECTORY_LOG_F_STRIDE",
    "TRAJECTORY_OFFSETS",
    "stage_seed",
]
