"""The test data and base of a fully visible model's run (`raise-eval trajectory` over DCA / Ising checkpoints): site
states from a .npy/.npz file (integer codes (N, L) for categorical sites, ±1 or 0/1 for spin and 0/1 sites) or an
alignment (FASTA, A2M, A3M, also gzipped) read with the alphabet (--alphabet, else the checkpoint's); with the data
base rates, the training data's site frequencies (`--train-data`), from which the start's fields are fitted
(`paths.fully_visible_trajectory.fully_visible_base`)."""

from __future__ import annotations

from typing import Any, Optional

import torch

from raise_eval.io.arrays import load_array_file
from raise_eval.io.inputs import EvaluationInputs, InputSettings, input_files
from raise_eval.io.sequences import is_sequence_file, read_alignment, resolve_alphabet
from raise_eval.paths.fully_visible_trajectory import site_frequencies
from raise_eval.settings import SettingsError


def fully_visible_inputs(inputs: InputSettings, init: str, ckpt) -> EvaluationInputs:
    """The `EvaluationInputs` of a fully visible checkpoint: its test site states (N, L) and, for `init`
    'base-rates', the training data's site frequencies (L, q) as `train_pixel_means`. SettingsError naming the
    option for what is missing or does not fit the model, before any work."""
    model = ckpt.model
    if inputs.data is None:
        raise SettingsError(
            "a fully visible model's test data are a file: pass {data} FILE (site codes .npy/.npz, or an alignment)",
            ("data",),
        )
    alphabet = _alphabet(inputs, model)
    test = _site_states(inputs.data, alphabet, model, "data")
    labels: dict[str, Any] = {"checkpoint": str(inputs.checkpoint), "data": inputs.data, "split": "file",
                              "pixel_order": "as stored", "base_rates_from": None}  # fmt: skip
    if alphabet is not None:
        labels["alphabet"] = alphabet
    if ckpt.source_format == "rbms":
        labels["update"] = ckpt.metadata["update"]
    frequencies = None
    if init == "base-rates":
        if not inputs.train_data:
            raise SettingsError(
                "{init} base-rates fits the start to the training data's site frequencies: pass {train_data} FILE "
                "(or {init} uniform)",
                ("train_data", "init"),
            )
        frequencies = site_frequencies(model, _site_states(inputs.train_data, alphabet, model, "train_data"))
        labels["base_rates_from"] = f"--train-data {inputs.train_data}"
    elif inputs.train_data:
        raise SettingsError(
            "{train_data} gives the data base rates, which {init} uniform does not use: drop it, or use {init} "
            "base-rates",
            ("train_data", "init"),
        )
    return EvaluationInputs(model, test, frequencies, labels, ckpt.metadata, input_files(inputs, ckpt.metadata))


def _alphabet(inputs: InputSettings, model) -> Optional[str]:
    given = None if inputs.alphabet is None else resolve_alphabet(inputs.alphabet)
    if given is None:
        return model.alphabet
    if model.sites != "categorical":
        raise SettingsError(f"{{alphabet}} reads alignments into categorical sites; these are {model.sites} sites: "
                            "drop it", ("alphabet",))  # fmt: skip
    if len(given) != model.num_states:
        raise SettingsError(f"{{alphabet}} has {len(given)} symbols ({given}) but the model's sites have q = "
                            f"{model.num_states} states", ("alphabet",))  # fmt: skip
    if model.alphabet is not None and given.upper() != model.alphabet.upper():
        raise SettingsError(f"{{alphabet}} {given} differs from the checkpoint's alphabet {model.alphabet}: the codes "
                            "would be read as other states; drop {alphabet}", ("alphabet",))  # fmt: skip
    return model.alphabet or given


def _site_states(path: str, alphabet: Optional[str], model, option: str) -> torch.Tensor:
    """Site states (N, L) of a file in the model's convention (SettingsError naming `option` otherwise)."""
    if is_sequence_file(path):
        if model.sites != "categorical" or alphabet is None:
            why = "categorical sites" if model.sites != "categorical" else "an alphabet: give {alphabet}"
            raise SettingsError(f"the alignment {path} ({{{option}}}) is read with {why}", (option,))
        return read_alignment(path, alphabet, model.n_visible)
    states = load_array_file(path, keep_float64=True)
    try:
        model.check_sites(states, f"{{{option}}} {path}")
    except ValueError as e:
        raise SettingsError(str(e), (option,)) from None
    return states.to(torch.int64) if model.sites == "categorical" else states.to(model.dtype)
