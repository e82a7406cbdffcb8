"""What an evaluation reads: a checkpoint, its test data and the data base rates, declared once (`InputSettings`)
and loaded in one step (`load_evaluation_inputs`), so that the command hands its inputs to the library once.

`InputSettings` checks what needs no file (the dataset's name, split and pixel order; the device); loading checks
the rest (the checkpoint's kind, the data's shape and values) and returns `EvaluationInputs`, typed data: the
model, the test vectors, the base rates, the labels the report shows and the files read (which no output may
overwrite).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
from torch import Tensor

from raise_eval.io.datasets import (
    DATASET_SPECS,
    DATASETS,
    PIXEL_ORDERS,
    DataError,
    check_binary,
    check_dataset_request,
    dataset_files,
    load_array_file,
    load_dataset,
)
from raise_eval.io.fully_visible_inputs import is_adabmdca_file, load_adabmdca_checkpoint, load_fully_visible_inputs
from raise_eval.io.sequences import is_sequence_file, read_alignment, resolve_alphabet
from raise_eval.models.contracts import declared_family
from raise_eval.settings import SettingsError, setting, settings_class

ARRAY_SUFFIXES = (".npy", ".npz")


def is_array_file(name: str) -> bool:
    """Whether a --data value names an array file (.npy/.npz) rather than a dataset."""
    return Path(name).suffix in ARRAY_SUFFIXES


def is_data_file(name: str) -> bool:
    """Whether a --data value names a file (an array, or an alignment: FASTA, A2M, A3M) rather than a dataset."""
    return is_array_file(name) or is_sequence_file(name)


def _check_alphabet(value) -> str:
    try:
        resolve_alphabet(value)
    except ValueError as e:
        raise SettingsError(f"{{alphabet}}: {e}", ("alphabet",)) from None
    return str(value)


def _splits_help() -> str:
    """The splits of the named datasets, e.g. "train, valid (binarized_mnist) or test": a split that not every
    dataset has names the ones that do."""
    rank = {"train": 0, "valid": 1, "test": 2}  # the usual order; any other split goes last
    splits = dict.fromkeys(s for spec in DATASET_SPECS.values() for s in spec.splits)
    splits = sorted(splits, key=lambda s: rank.get(s, len(rank)))
    words = []
    for split in splits:
        owners = [name for name, spec in DATASET_SPECS.items() if split in spec.splits]
        words.append(split if len(owners) == len(DATASET_SPECS) else f"{split} ({', '.join(owners)})")
    return ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else words[0]


def check_device(value) -> str:
    """A torch device this machine has, as text ('cpu', 'cuda', 'cuda:1')."""
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError):
        raise SettingsError(
            f"{{device}} {value!r} is not a torch device; use cpu, cuda or cuda:N", ("device",)
        ) from None
    if device.type not in ("cpu", "cuda"):
        raise SettingsError(f"{{device}} {value}: raise-eval runs on cpu or cuda, not {device.type}", ("device",))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SettingsError(f"{{device}} {value} was asked for but torch.cuda.is_available() is False", ("device",))
    return str(value)


def device_setting() -> Any:
    return setting("cpu", "torch device, e.g. cpu, cuda, cuda:1", kind="any", check=check_device, flag="--device",
                   group="run")  # fmt: skip


def dtype_setting() -> Any:
    return setting("float32", "precision of states and model (log-weights are always float64)", kind="choice",
                   choices=("float32", "float64"), flag="--dtype", group="run")  # fmt: skip


@settings_class
class InputSettings:
    """Where an evaluation's model and data come from, and the device and precision to compute in."""

    checkpoint: Optional[str] = setting(
        None,
        "RBM, DBM, DBN or fully visible model checkpoint: .pt (raise-eval), .npz, .mat or an rbms run (.h5); an "
        "adabmDCA parameter file (.dat, .dat.gz, read with --alphabet); or give --model",
        kind="path",
        none="--model", metavar="CHECKPOINT", flag="checkpoint",
    )  # fmt: skip
    update: Optional[int] = setting(
        None, "the update to read from an rbms training run's HDF5 file (CHECKPOINT.h5): its group update_N",
        kind="count", least=0, none="the last update", flag="--update", metavar="N", group="model",
    )  # fmt: skip
    model: Optional[str] = setting(
        None,
        "your own energy-based model instead of a checkpoint: FACTORY() in FILE.py returns it wrapped in "
        "raise_eval.EnergyModel; --data (and --train-data, for the base) are then .npy/.npz files of its examples",
        kind="text", none="the CHECKPOINT", flag="--model", metavar="FILE.py:FACTORY", group="model",
    )  # fmt: skip
    data: Optional[str] = setting(
        None,
        f"test data: a named dataset ({', '.join(DATASET_SPECS)}) or a .npy/.npz file of vectors shaped "
        "(N, n_visible): binary for binary units, real numbers for Gaussian units, ±1 or 0/1 for spins, integer "
        "codes (N, sites) for categorical (Potts) units; or for those an alignment (.fasta, .a2m, .a3m, also "
        "gzipped) read with --alphabet",
        kind="text", none="the dataset recorded in the checkpoint's metadata", flag="--data", metavar="NAME|FILE",
        group="data",
    )  # fmt: skip
    split: str = setting(
        "test", f"split of a named dataset: {_splits_help()}", kind="text", flag="--split", group="data"
    )
    pixel_order: str = setting(
        "row-major",
        "how a named dataset's images are flattened: row-major, or fortran (column-major, each image transposed), "
        "the order of Burda's 28x28 Omniglot and so of the Grosse & Salakhutdinov Omniglot RBMs "
        "(rbm_omniglot_*.npz): use fortran with those and --data omniglot. Files are used as stored",
        kind="choice", choices=PIXEL_ORDERS, flag="--pixel-order", group="data",
    )  # fmt: skip
    data_root: Optional[str] = setting(
        None, "folder with MNIST/raw, binarized_mnist and omniglot", kind="path",
        none="$RAISE_EVAL_DATA, else ../shared/data", flag="--data-root", metavar="DIR", group="data",
    )  # fmt: skip
    train_data: Optional[str] = setting(
        None,
        "training vectors (.npy/.npz, or an alignment for categorical units) for the data base rates; when given "
        "they are used instead of the checkpoint's train_pixel_means or the named dataset's training split",
        kind="path", none="the checkpoint's or the dataset's", flag="--train-data", metavar="FILE", group="data",
    )  # fmt: skip
    alphabet: Optional[str] = setting(
        None,
        "symbols of a categorical (Potts) visible layer's or fully visible model's states, for alignment files and "
        "adabmDCA parameter files: protein "
        "(-ACDEFGHIKLMNPQRSTVWY), rna (-ACGU), dna (-ACGT), or the q symbols in order. FASTA is read without "
        "regard to case ('.' as a gap); in A2M and A3M files lower-case letters and '.' are insertions and are "
        "removed",
        kind="any", check=_check_alphabet, none="the checkpoint's alphabet", flag="--alphabet", metavar="NAME|SYMBOLS",
        group="data",
    )  # fmt: skip
    device: str = device_setting()
    dtype: str = dtype_setting()

    def _validate(self) -> None:
        if (self.checkpoint is None) == (self.model is None):
            raise SettingsError(
                "give a {checkpoint} or {model} FILE.py:FACTORY (one of the two)", ("checkpoint", "model")
            )
        if self.model is not None:
            self._check_energy_request()
            return
        if Path(self.checkpoint).is_dir():
            raise SettingsError(f"{{checkpoint}} {self.checkpoint} is a folder; give the checkpoint file")
        if self.update is not None and Path(self.checkpoint).suffix.lower() not in (".h5", ".hdf5"):
            raise SettingsError(
                f"{{update}} chooses an update of an rbms run's HDF5 file (.h5); {self.checkpoint} is not one: drop it"
            )
        if self.data is not None:
            self.check_data_request(self.data)

    def _check_energy_request(self) -> None:
        """With {model}: the data are files of the energy's examples; what belongs to checkpoints is refused."""
        if self.update is not None:
            raise SettingsError("{update} chooses an update of an rbms run's HDF5 checkpoint, not of {model}: drop it")
        if self.data is None:
            raise SettingsError("{model} needs {data} FILE, a .npy/.npz file of test examples", ("data",))
        for name, what in (("data", "test"), ("train_data", "training")):
            path = getattr(self, name)
            if path is None:
                continue
            # named here, before the user's model is built: the reader's own message names no option
            if not is_array_file(path):
                raise SettingsError(f"{{{name}}} {path} is not a .npy/.npz file; with {{model}} give a .npy/.npz "
                                    f"file of {what} examples (numpy.save)", (name,))  # fmt: skip
            if not Path(path).exists():
                raise SettingsError(f"{{{name}}} {path} does not exist; give a .npy/.npz file of {what} examples",
                                    (name,))  # fmt: skip
        for name, default in (("split", "test"), ("pixel_order", "row-major"), ("alphabet", None),
                              ("data_root", None)):  # fmt: skip
            if getattr(self, name) != default:
                raise SettingsError(f"{{{name}}} applies to checkpoints' datasets, not to {{model}}'s files", (name,))

    def check_data_request(self, data: str) -> None:
        """The data options against a --data value (or the checkpoint's dataset): a file takes no pixel order; a
        dataset must have the split and take the pixel order."""
        if is_data_file(data):
            if self.pixel_order != "row-major":
                raise SettingsError(
                    f"{{pixel_order}} {self.pixel_order} reorders the images of named datasets; the vectors of "
                    f"{data} are used as stored (reorder them before saving)"
                )
            return
        try:
            check_dataset_request(data, self.split, self.pixel_order)
        except DataError as e:
            raise SettingsError(f"{{data}} {data}: {e}", ("data",)) from None

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)


@dataclass
class EvaluationInputs:
    """What `load_evaluation_inputs` read: the model (on the device, in the dtype), the test vectors (N, n_visible),
    the base rates of the annealed machine's visible layer (None for a uniform start), the labels the report shows,
    the checkpoint's metadata and the files read, as (what, path) pairs."""

    model: Any
    test: Tensor
    train_pixel_means: Optional[Tensor]
    labels: dict[str, Any]
    metadata: dict[str, Any]
    files: list[tuple[str, Optional[str]]] = field(default_factory=list)


def load_model(inputs: InputSettings):
    """The checkpoint's `Checkpoint` (model on the device, in the dtype); of a family evaluate runs (RBM, DBM, DBN,
    fully visible: as the model declares), else SettingsError saying where it runs."""
    from raise_eval.models.io.checkpoints import load_checkpoint

    if is_adabmdca_file(inputs.checkpoint):  # a fully visible model in adabmDCA's text format, read with --alphabet
        return load_adabmdca_checkpoint(inputs)
    ckpt = load_checkpoint(
        inputs.checkpoint, dtype=inputs.torch_dtype, device=torch.device(inputs.device), update=inputs.update
    )
    family = declared_family(ckpt.model)
    if family not in ("RBM", "DBM", "DBN", "fully-visible"):
        raise SettingsError(
            f"{{checkpoint}} {inputs.checkpoint} holds a {type(ckpt.model).__name__}; raise-eval evaluate evaluates "
            f"RBMs, DBMs, DBNs and fully visible models ({_ELSEWHERE.get(family, 'use raise-eval bdmc for VAEs')})"
        )
    return ckpt


# Where a checkpoint of a family `evaluate` does not run is served instead.
_ELSEWHERE = {
    "directed": "use raise-eval bdmc for VAEs and decoders",
}


def input_files(inputs: InputSettings, metadata: dict) -> list[tuple[str, Optional[str]]]:
    """The files an evaluation reads, which no output may name: the checkpoint, the data files, or the files of a
    named dataset (every split: the training split may give the base rates)."""
    files = [("the checkpoint", inputs.checkpoint), ("the --train-data file", inputs.train_data)]
    data = inputs.data or _known_dataset(metadata)
    if data is not None and is_data_file(data):
        files.append(("the --data file", data))
    elif data in DATASET_SPECS:
        for split in DATASET_SPECS[data].splits:
            files += [(f"a file of the {data} dataset", str(f)) for f in dataset_files(data, split, inputs.data_root)]
    return files


def _known_dataset(metadata: dict) -> Optional[str]:
    """The dataset a checkpoint's metadata names, when it is one raise-eval knows; else None."""
    name = metadata.get("dataset")
    return name if isinstance(name, str) and name in DATASET_SPECS else None


def _dataset_of(checkpoint: str, metadata: dict) -> str:
    """The default --data: the dataset the checkpoint's metadata names. Metadata names a dataset, never a file to
    read (a checkpoint from elsewhere must not make the command open a path of its choosing), so anything but a
    known dataset's name is refused, saying to pass --data."""
    name = metadata.get("dataset")
    if name is None:
        raise SettingsError(
            "this checkpoint does not say which data it was trained on: pass {data} NAME or {data} FILE", ("data",)
        )
    known = _known_dataset(metadata)
    if known is not None:
        return known
    if isinstance(name, str) and is_data_file(name):
        fix = f"to evaluate on that file, pass {{data}} {name}"
    else:
        fix = "pass {data} NAME or {data} FILE"
    raise SettingsError(
        f"{checkpoint}'s metadata names the dataset {name!r:.80}, which is not a dataset raise-eval knows "
        f"({', '.join(DATASET_SPECS)}); a checkpoint's metadata names a dataset, never a file to read: {fix}",
        ("data",),
    )


def load_evaluation_inputs(inputs: InputSettings, init: str, ckpt=None) -> EvaluationInputs:
    """Read the checkpoint (unless `ckpt`, already loaded, is given), the test data and, for init='base-rates', the
    base rates: pixel means (RBM, DBM) or, for a DBN, the recognition means of its top RBM's visible layer over the
    training data."""
    from raise_eval.evaluation.plan import recognition_means
    from raise_eval.models.boltzmann.dbn import DBN

    ckpt = load_model(inputs) if ckpt is None else ckpt
    metadata = ckpt.metadata
    if declared_family(ckpt.model) == "fully-visible":  # site states and site frequencies (io.fully_visible_inputs)
        model, test, frequencies, labels = load_fully_visible_inputs(inputs, init, ckpt)
        return EvaluationInputs(model, test, frequencies, labels, metadata, input_files(inputs, metadata))
    data = inputs.data or _dataset_of(inputs.checkpoint, metadata)
    inputs.check_data_request(data)
    mixed = ckpt.model.typed_layers  # typed layers: data in the forms of its visible layer
    alphabet = _alphabet(inputs, ckpt.model, data)
    if is_data_file(data):
        test = _read_data_file(data, alphabet, mixed, ckpt.model)
    else:
        test = load_dataset(data, inputs.split, inputs.data_root, inputs.pixel_order)
    labels: dict[str, Any] = {
        "checkpoint": str(inputs.checkpoint),
        "data": data,
        "split": inputs.split if data in DATASETS else "file",
        "pixel_order": inputs.pixel_order if data in DATASETS else "as stored",
        "base_rates_from": None,
    }
    if alphabet is not None:
        labels["alphabet"] = alphabet
    if ckpt.source_format == "rbms":  # which update of the run was evaluated
        labels["update"] = ckpt.metadata["update"]
    means = None
    if init == "base-rates":
        is_dbn = isinstance(ckpt.model, DBN)
        train = None
        if inputs.train_data:
            train = _read_data_file(inputs.train_data, alphabet, mixed, ckpt.model)
            if not mixed:
                train = check_binary(train, ckpt.model.n_visible, "training data")
            labels["base_rates_from"] = f"--train-data {inputs.train_data}"
        elif ckpt.train_pixel_means is not None and not is_dbn:
            labels["base_rates_from"] = "the checkpoint's train_pixel_means"
            means = ckpt.train_pixel_means
        elif data in DATASETS:
            train = load_dataset(data, "train", inputs.data_root, inputs.pixel_order)
            if not mixed:
                train = check_binary(train, ckpt.model.n_visible, f"{data} training data")
            labels["base_rates_from"] = f"the {data} training split"
        if means is None and train is None:
            why = (
                " (a DBN's base rates are the recognition means of its top RBM's visible layer over the training "
                "vectors, so the pixel means a checkpoint keeps are not enough)"
                if is_dbn
                else ""
            )
            raise SettingsError(
                f"{{init}} base-rates needs training data{why}: pass {{train_data}} FILE (or {{init}} uniform)",
                ("train_data", "init"),
            )
        if means is None and mixed:  # the visible layer's sufficient statistics
            from raise_eval.paths.mixed import visible_statistics

            means = visible_statistics(ckpt.model, train)
        if means is None:
            means = recognition_means(ckpt.model, train) if is_dbn else train.double().mean(0)
    elif inputs.train_data:
        raise SettingsError(
            "{train_data} gives the data base rates, which {init} uniform does not use: drop it, or use {init} "
            "base-rates",
            ("train_data", "init"),
        )
    return EvaluationInputs(ckpt.model, test, means, labels, metadata, input_files(inputs, metadata))


def _alphabet(inputs: InputSettings, model, data: str) -> Optional[str]:
    """The alphabet sequence files are read with: --alphabet, else the checkpoint's; SettingsError when the two
    differ, when a sequence file has none, or when the model has no categorical visible layer to read them into."""
    layer = model.layers[0] if model.typed_layers else None
    categorical = layer is not None and layer.kind == "categorical"
    sequences = [f for f in (data, inputs.train_data) if f and is_sequence_file(f)]
    if not categorical:
        units = layer.kind if layer is not None else "binary"
        if inputs.alphabet is not None:
            raise SettingsError(
                f"{{alphabet}} reads sequence files into a categorical (Potts) visible layer; this checkpoint's "
                f"visible units are {units}: drop {{alphabet}}",
                ("alphabet",),
            )
        present = [f for f in sequences if Path(f).exists()]  # a missing file is reported as missing, later
        if present:
            raise SettingsError(
                f"the alignment {present[0]} is for a categorical (Potts) visible layer; this checkpoint's visible "
                f"units are {units}: give its data as a .npy/.npz file",
                ("data",),
            )
        return None
    given = None if inputs.alphabet is None else resolve_alphabet(inputs.alphabet)
    if given is not None and len(given) != layer.q:
        raise SettingsError(f"{{alphabet}} has {len(given)} symbols ({given}) but the model's sites have q = "
                            f"{layer.q} states", ("alphabet",))  # fmt: skip
    if given is not None and layer.alphabet is not None and given.upper() == layer.alphabet.upper():
        given = layer.alphabet  # letters are read without regard to case: the same alphabet
    if given is not None and layer.alphabet is not None and given != layer.alphabet:
        raise SettingsError(
            f"{{alphabet}} {given} differs from the checkpoint's alphabet {layer.alphabet}: the codes would be read "
            "as other states; drop {alphabet} (or fix the checkpoint's)",
            ("alphabet",),
        )
    alphabet = given or layer.alphabet
    if alphabet is None and sequences:
        raise SettingsError(
            f"the alignment {sequences[0]} is read with an alphabet, and the checkpoint has none: give {{alphabet}} "
            f"protein, rna, dna or the {layer.q} symbols in order",
            ("alphabet",),
        )
    return alphabet


def _read_data_file(path: str, alphabet: Optional[str], mixed: bool, model=None) -> Tensor:
    """An array file (float64 kept for a machine of typed layers, whose real-valued data keep their precision) or
    an alignment's integer codes (as many columns as the model's visible layer has sites)."""
    if is_sequence_file(path):
        sites = model.layers[0].size if model is not None and model.typed_layers else None
        return read_alignment(path, alphabet, sites)
    return load_array_file(path, keep_float64=mixed)


@settings_class
class BDMCInputSettings:
    """Where a BDMC run's model (a checkpoint, or the user's own factory) and optional real data come from."""

    checkpoint: Optional[str] = setting(
        None, "a raise-eval VAE checkpoint (.pt); or give --model", kind="path", none="--model", metavar="CHECKPOINT",
        flag="checkpoint",
    )  # fmt: skip
    model: Optional[str] = setting(
        None,
        "your own model instead of a checkpoint: FACTORY() in FILE.py returns it, e.g. your decoder wrapped in "
        "raise_eval.DecoderModel (moved to --device and --dtype)",
        kind="text", none="the CHECKPOINT", flag="--model", metavar="FILE.py:FACTORY", group="model",
    )  # fmt: skip
    real_data: Optional[str] = setting(
        None, "also run ELBO, IWAE and forward AIS on real vectors (e.g. binarized_mnist)", kind="text",
        none="none", flag="--real-data", metavar="NAME|FILE", group="real data",
    )  # fmt: skip
    simulated: Optional[str] = setting(
        None,
        "your own simulated examples instead of the model's: a .npz with arrays z (N, latent_dim) and x (N, data_dim), "
        "x drawn from p(x | z) and z from p(z); the first --examples pairs are used",
        kind="path", none="simulated from the model", flag="--simulated", metavar="FILE.npz", group="model",
    )  # fmt: skip
    data_root: Optional[str] = setting(
        None, "with --real-data NAME: the data root", kind="path", none="$RAISE_EVAL_DATA, else ../shared/data",
        flag="--data-root", metavar="DIR", group="real data",
    )  # fmt: skip
    device: str = device_setting()
    dtype: str = dtype_setting()

    def _validate(self) -> None:
        if (self.checkpoint is None) == (self.model is None):
            raise SettingsError(
                "give a {checkpoint} or {model} FILE.py:FACTORY (one of the two)", ("checkpoint", "model")
            )
        if self.real_data is None:
            if self.data_root is not None:
                raise SettingsError("{data_root} belongs to {real_data}: give {real_data} NAME|FILE too")
        elif not is_array_file(self.real_data):
            try:
                check_dataset_request(self.real_data, "test")
            except DataError as e:
                raise SettingsError(f"{{real_data}} {self.real_data}: {e}", ("real_data",)) from None
        elif not Path(self.real_data).is_file():
            raise SettingsError(f"{{real_data}} {self.real_data}: no such file", ("real_data",))

    def files(self) -> list[tuple[str, Optional[str]]]:
        """The files a bdmc run reads, which no output may name."""
        model_file = self.model and self.model.rpartition(":")[0]
        files = [("the checkpoint", self.checkpoint), ("the --model file", model_file),
                 ("the --simulated file", self.simulated)]  # fmt: skip
        if self.real_data and is_array_file(self.real_data):
            files.append(("the --real-data file", self.real_data))
        elif self.real_data:
            found = dataset_files(self.real_data, "test", self.data_root)
            files += [(f"a file of the {self.real_data} dataset", str(f)) for f in found]
        return files


def load_directed_model(inputs: BDMCInputSettings):
    """The model of a BDMC run: the checkpoint's, or the user's factory's (`raise_eval.io.user_model`), on the
    device and in the dtype; SettingsError when it is not a directed model."""
    from raise_eval.io.user_model import build_user_model
    from raise_eval.models.io.checkpoints import load_checkpoint

    device, dtype = torch.device(inputs.device), getattr(torch, inputs.dtype)
    if inputs.model is not None:
        model = build_user_model(inputs.model)  # UserCodeError: the user's code failed, said in their words
        if isinstance(model, torch.nn.Module):
            model.to(device=device, dtype=dtype).requires_grad_(False)  # HMC differentiates in z only
        return model
    model = load_checkpoint(inputs.checkpoint, dtype=dtype, device=device).model
    if declared_family(model) != "directed":
        raise SettingsError(
            f"{{checkpoint}} {inputs.checkpoint} holds an {type(model).__name__}; raise-eval bdmc evaluates directed "
            "models (VAEs); use raise-eval evaluate for RBMs"
        )
    return model


def load_real_data(inputs: BDMCInputSettings, model) -> Optional[Tensor]:
    """--real-data, checked against the model: its likelihood's support when it says (DecoderModel.check_data), else
    binary vectors (raise-eval's VAEs); None without real data."""
    if inputs.real_data is None:
        return None
    if is_array_file(inputs.real_data):
        data = load_array_file(inputs.real_data)
    else:
        data = load_dataset(inputs.real_data, "test", inputs.data_root)
    return check_real_data(model, data)


def load_simulated(inputs: BDMCInputSettings) -> Optional[tuple[Tensor, Tensor]]:
    """--simulated FILE.npz as (z, x) tensors (checked against the model by `evaluate_bdmc`); None without it."""
    import numpy as np

    if inputs.simulated is None:
        return None
    path = Path(inputs.simulated)
    if not path.is_file():
        raise SettingsError(f"{{simulated}} {path}: no such file", ("simulated",))
    try:
        with np.load(path, allow_pickle=False) as arrays:
            missing = [k for k in ("z", "x") if k not in arrays]
            if missing:
                raise SettingsError(
                    f"{{simulated}} {path} holds arrays {sorted(arrays.keys())}; it needs z (N, latent_dim) and x "
                    "(N, data_dim): numpy.savez(path, z=z, x=x)",
                    ("simulated",),
                )
            return torch.from_numpy(np.asarray(arrays["z"])), torch.from_numpy(np.asarray(arrays["x"]))
    except (OSError, ValueError) as e:
        if isinstance(e, SettingsError):
            raise
        raise SettingsError(f"{{simulated}} {path} is not a readable .npz archive ({e})", ("simulated",)) from None


def check_real_data(model, data: Tensor) -> Tensor:
    """Real data against a directed model: its likelihood's support when it says (DecoderModel.check_data, in the
    data's own floating-point precision), else binary vectors (raise-eval's VAEs)."""
    if model.data_support == "declared":
        return model.check_data(data if data.is_floating_point() else data.float(), "real data")
    return check_binary(data, model.data_dim, "real data")
