"""What `raise-eval evaluate` reads for a fully visible model (the 'fully-visible' family: DCA Potts and Ising
models): the model from an .npz / .pt checkpoint (`models.io.fully_visible_files`) or an adabmDCA parameter file
(`params.dat`, gzipped or not, read with --alphabet: protein by default), the test vectors of --data and the training
vectors of --train-data, each a .npy/.npz array of site states shaped (N, L) (integer codes 0..q-1 for categorical
sites, -1/+1 for spin, 0/1 for bernoulli) or, for categorical sites, an alignment (FASTA, A2M, A3M) read with the
model's alphabet. Everything is checked against the model's sites before any work, and each refusal names the
option and the file.

The base is fitted to the training vectors' site frequencies (`paths.fully_visible.site_frequencies`); without
--train-data the plan starts from uniform fields and says so in a note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.io.arrays import load_array_file
from raise_eval.io.sequences import is_sequence_file, read_alignment, resolve_alphabet
from raise_eval.paths.fully_visible import site_frequencies
from raise_eval.settings import SettingsError

# adabmDCA's parameter files (its io.save_params): params.dat, or gzipped
ADABMDCA_SUFFIXES = (".dat", ".dat.gz")


def is_adabmdca_file(name: str) -> bool:
    """Whether a checkpoint path names an adabmDCA parameter file (.dat, .dat.gz)."""
    return str(name).lower().endswith(ADABMDCA_SUFFIXES)


def load_adabmdca_checkpoint(inputs):
    """The `Checkpoint` of an adabmDCA parameter file (`models.io.fully_visible_files.read_adabmdca_parameters`),
    read with --alphabet (protein when not given), on the device in the dtype."""
    from raise_eval.models.io.builders import CheckpointError
    from raise_eval.models.io.checkpoints import Checkpoint
    from raise_eval.models.io.fully_visible_files import read_adabmdca_parameters

    path = Path(inputs.checkpoint)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist (or is not a file)")
    alphabet = "protein" if inputs.alphabet is None else str(inputs.alphabet)
    try:
        model = read_adabmdca_parameters(path, alphabet=alphabet, dtype=torch.float64)
    except CheckpointError as e:
        if inputs.alphabet is not None or "alphabet" not in str(e):
            raise
        raise SettingsError(f"{e} (read with the protein alphabet, as no {{alphabet}} was given: give {{alphabet}} "
                            "rna, dna or the file's symbols in order)", ("alphabet",)) from None  # fmt: skip
    model = model.to(device=torch.device(inputs.device), dtype=inputs.torch_dtype)
    metadata = {"format": "adabmDCA parameters", "alphabet": model.alphabet}
    return Checkpoint(model, metadata, None, str(path), "adabmDCA")


def fully_visible_alphabet(inputs, model) -> Optional[str]:
    """The alphabet alignment files are read with: --alphabet, else the model's; SettingsError when the two differ,
    when --alphabet does not have q symbols, or when the sites are not categorical (spin and bernoulli sites are read
    from arrays only)."""
    sequences = [f for f in (inputs.data, inputs.train_data) if f and is_sequence_file(f)]
    if model.sites != "categorical":
        if inputs.alphabet is not None:
            raise SettingsError(
                f"{{alphabet}} reads alignments into categorical sites; this model's sites are {model.sites}: drop "
                "{alphabet}",
                ("alphabet",),
            )
        if sequences:
            raise SettingsError(
                f"the alignment {sequences[0]} is for categorical sites; this model's sites are {model.sites}: give "
                f"its data as a .npy/.npz file of {'-1/+1' if model.sites == 'spin' else '0/1'} states shaped (N, "
                f"{model.n_visible})",
                ("data",),
            )
        return None
    given = None if inputs.alphabet is None else resolve_alphabet(inputs.alphabet)
    if given is not None and len(given) != model.num_states:
        raise SettingsError(f"{{alphabet}} has {len(given)} symbols ({given}) but the model's sites have q = "
                            f"{model.num_states} states", ("alphabet",))  # fmt: skip
    if given is not None and model.alphabet is not None and given.upper() != model.alphabet.upper():
        raise SettingsError(
            f"{{alphabet}} {given} differs from the model's alphabet {model.alphabet}: the codes would be read as "
            "other states; drop {alphabet}",
            ("alphabet",),
        )
    alphabet = model.alphabet or given
    if alphabet is None and sequences:
        raise SettingsError(
            f"the alignment {sequences[0]} is read with an alphabet, and the model has none: give {{alphabet}} "
            f"protein, rna, dna or the {model.num_states} symbols in order",
            ("alphabet",),
        )
    return alphabet


def read_site_states(model, path: str, alphabet: Optional[str], option: str) -> Tensor:
    """The site states of a --data or --train-data file (an array, or an alignment's codes for categorical sites),
    checked against the model's sites: SettingsError naming the option and the file when they do not fit."""
    if is_sequence_file(path):
        states = read_alignment(path, alphabet, model.n_visible)
    else:
        states = load_array_file(path)
    try:
        if states.dim() != 2 or states.shape[0] == 0:
            raise ValueError(
                f"holds an array shaped {tuple(states.shape)}; the model's vectors are shaped (N, {model.n_visible}) "
                "with N >= 1, one state per site"
            )
        model.check_sites(states, "it")
    except ValueError as e:
        raise SettingsError(f"{{{option}}} {path}: {e}", (option,)) from None
    return states


def load_fully_visible_inputs(inputs, init: str, ckpt) -> tuple[Any, Tensor, Optional[Tensor], dict]:
    """(model, test site states (N, L), the training vectors' site frequencies (L, q) or None, labels) of a fully
    visible model's checkpoint, its --data and --train-data."""
    model = ckpt.model
    data = inputs.data
    if data is None or not _is_file_name(data):
        shown = "no --data" if data is None else f"{{data}} {data}"
        raise SettingsError(
            f"{shown}: a fully visible model's test data are a file: give {{data}} FILE, a .npy/.npz array of site "
            f"states shaped (N, {model.n_visible})" + (" or an alignment (.fasta, .a2m, .a3m)"
                                                      if model.sites == "categorical" else ""),
            ("data",),
        )  # fmt: skip
    inputs.check_data_request(data)
    alphabet = fully_visible_alphabet(inputs, model)
    test = read_site_states(model, data, alphabet, "data")
    labels: dict[str, Any] = {
        "checkpoint": str(inputs.checkpoint),
        "data": data,
        "split": "file",
        "pixel_order": "as stored",
        "base_rates_from": None,
    }
    if alphabet is not None:
        labels["alphabet"] = alphabet
    if ckpt.source_format == "rbms":  # which update of the run was evaluated
        labels["update"] = ckpt.metadata["update"]
    frequencies = None
    if init == "base-rates" and inputs.train_data:
        train = read_site_states(model, inputs.train_data, alphabet, "train_data")
        frequencies = site_frequencies(model, train)
        labels["base_rates_from"] = f"--train-data {inputs.train_data}"
    elif inputs.train_data:
        raise SettingsError(
            "{train_data} gives the base's site frequencies, which {init} uniform does not use: drop it, or use "
            "{init} base-rates",
            ("train_data", "init"),
        )
    return model, test, frequencies, labels


def _is_file_name(name: str) -> bool:
    return Path(name).suffix in (".npy", ".npz") or is_sequence_file(name)
