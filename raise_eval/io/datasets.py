"""Datasets of binary vectors, read from disk with numpy (no torchvision; nothing downloaded, nothing cached).

Named datasets are the rows of `DATASET_SPECS` (name, splits and their sizes, image shape, loader, description);
`load_dataset(name, split, data_root, pixel_order)` returns a split as a float32 tensor (N, D) of 0s and 1s. The
command line's choices and the README's table (`dataset_table()`) come from the same rows:

- digits (8x8; train, test): scikit-learn's 8x8 digits binarized at half intensity, embedded (no data root).
- mnist (28x28; train, test): MNIST idx files, binarized stochastically (pixel / 255) with a fixed seed per split.
- mnist14 (14x14; train, test): MNIST average-pooled 2x2 to 14x14 and thresholded at 0.5.
- binarized_mnist (28x28; train, valid, test): Larochelle & Murray's fixed binarization (.amat files).
- omniglot (28x28; train, test): Omniglot downsampled to 28x28 and binarized, built as described below.

Pixel order: images are flattened row-major (pixel (r, c) of an H x W image is column r * W + c) unless
`pixel_order="fortran"`, which flattens each image column-major (column c * H + r: the image transposed, then
flattened). Fortran order is that of Burda's Omniglot file chardata.mat, and so of the Omniglot RBMs of Grosse &
Salakhutdinov (2015) in ../shared/data/checkpoints; use it to evaluate those.

Omniglot. The RAISE paper used Burda's 28x28 Omniglot (a random 24,345 / 8,070 train / test split); that file is
not available, so the set is rebuilt, deterministically, from the 105x105 originals in
omniglot/images_background.npz and omniglot/images_evaluation.npz (`images` bool (n_characters, 20, 105, 105),
True = background):

1. Order: all 32,460 images, the 964 background characters then the 659 evaluation characters, each character's
   20 drawers in order; image k is (character k // 20, drawer k % 20), characters counted on through both files.
2. Ink = 1 (the files' bool images inverted).
3. Downsampling 105 -> 28 by exact area averaging (a box filter with fractional overlaps, what an antialiased
   resize does): out = A @ img @ A.T, A the (28, 105) matrix of overlaps of output with input pixels, rows summing
   to 1 (`area_matrix`), so each output pixel is the ink fraction of its 3.75 x 3.75 square. It is computed as
   integer ink counts (units of 1/16 of an input pixel, 225 per output pixel) divided by 225, so the fractions are
   exact whatever the BLAS (`downsample_area`).
4. Binarization: pixel = u < ink fraction, u = np.random.RandomState(1).random_sample((32460, 28, 28)) drawn for
   all images in the order of step 1 (a fixed-seed Bernoulli(ink fraction) draw; an image's draw does not depend
   on the split). Chosen over a fixed threshold by the evidence of rbm_omniglot_sgd_grosse_salakhutdinov_2015,
   the RBM trained on Burda's set (Fortran order, all 32,460 images, model moments from 4,000 Gibbs chains of
   1,500 sweeps): on its training distribution an RBM's log-likelihood gradient (data moments minus model
   moments) should be near zero, and it is smallest for the Bernoulli draw: |grad hbias| 0.137 against 0.242,
   |grad W| 1.23 against 1.47, mean negative energy E_data - E_model +9.5 nats against +21.3, for the best
   threshold (ink fraction >= 0.5; thresholds 0.3 to 0.6 all worse). Ink per image: model 64.8, Bernoulli 63.1,
   threshold 0.5 62.9; ink pixels with no inked 4-neighbour: model samples 3.9, Bernoulli 1.0, threshold 0.08.
   (sigmoid(vbias) sums to 37.7: the biases alone say little.) The mean log f(v) over the 8,070 test images is
   higher for thresholded images (482.5 at 0.5 against 470.7), but it rises monotonically with the threshold
   (466.9 at 0.1 to 482.7 at 0.6): it rewards sparse, noise-free images rather than the training distribution, and
   the model's own samples score about 460. (Burda's file holds grey levels, which its users binarize
   stochastically.)
5. Split: perm = np.random.RandomState(0).permutation(32460) (the legacy generator, whose streams are frozen
   across numpy versions); train = images perm[:24345], test = images perm[24345:32415], in that order
   (`omniglot_split_indices`). The paper's sizes sum to 32,415, not 32,460 (Burda's file holds 32,415 images), so
   the last 45 images of the permutation, perm[32415:], are in neither split.

Files (`raise_eval.io.arrays`): a .npy array, or a .npz holding one array (or one named `data`, `x` or `images`),
of binary vectors shaped (N, D).

The data root holds MNIST/raw/*.gz, binarized_mnist/*.amat and omniglot/*.npz (the layout of ../shared/data). It
is, in order: the `data_root` argument, $RAISE_EVAL_DATA, ./../shared/data, and ../shared/data beside the project
checkout.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np
import torch
from torch import Tensor

from raise_eval.io.arrays import DataError, check_binary, load_array_file  # noqa: F401 (re-exported for code that imports them from here)
from raise_eval.models.io.files import why_unusable

DATA_ROOT_ENV = "RAISE_EVAL_DATA"
_PACKAGE_DATA = Path(__file__).resolve().parents[1] / "data"  # raise_eval/data
_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
# Seed of MNIST's stochastic binarization, per split, so that train and test use different noise.
MNIST_BINARIZATION_SEEDS = {"train": 1234, "test": 5678}
PIXEL_ORDERS = ("row-major", "fortran")

# Omniglot (see the module docstring): the two files in their fixed order, the image sizes, the RAISE paper's
# split sizes and the two seeds (numpy's legacy RandomState).
OMNIGLOT_FILES = ("images_background.npz", "images_evaluation.npz")
OMNIGLOT_CHARACTERS = (964, 659)
OMNIGLOT_DRAWERS = 20
OMNIGLOT_SOURCE_SIZE = 105
OMNIGLOT_SIZE = 28
OMNIGLOT_SPLIT_SIZES = {"train": 24345, "test": 8070}
OMNIGLOT_SPLIT_SEED = 0
OMNIGLOT_BINARIZATION_SEED = 1
# Images downsampled and binarized per chunk: bounds the float64 working set (about 90 MB) whatever N.
_OMNIGLOT_CHUNK = 1024


def resolve_data_root(data_root: Optional[Union[str, Path]] = None) -> Path:
    """The folder with MNIST/, binarized_mnist/ and omniglot/ (see the module docstring for the search order)."""
    if data_root is not None:
        root = Path(data_root).expanduser()
        if not root.is_dir():
            why = why_unusable(root)
            if why is None:  # a regular file
                raise DataError(
                    f"data root {root} is a file, not a folder; give the folder that holds MNIST/, binarized_mnist/ "
                    "and omniglot/ (--data-root)"
                )
            if why == "does not exist":
                raise FileNotFoundError(f"data root {root} does not exist")
            raise DataError(f"data root {root} {why}; give the folder that holds the datasets (--data-root)")
        return root
    env = os.environ.get(DATA_ROOT_ENV)
    if env:
        root = Path(env).expanduser()
        if not root.is_dir():
            raise FileNotFoundError(f"${DATA_ROOT_ENV}={env} is not a folder")
        return root
    for candidate in (Path.cwd().parent / "shared" / "data", Path(__file__).resolve().parents[2] / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        "no data root found: pass --data-root DIR (or set $RAISE_EVAL_DATA) to a folder holding MNIST/raw/*.gz, "
        "binarized_mnist/*.amat or omniglot/*.npz; the embedded dataset 'digits' needs none"
    )


def read_idx(path: Union[str, Path]) -> np.ndarray:
    """Read an idx file (optionally gzipped), the format of the original MNIST files."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (zlib.error, EOFError, gzip.BadGzipFile) as e:  # truncated or damaged compressed data
        raise DataError(f"{path} cannot be read: it is truncated or damaged ({type(e).__name__}: {e})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataError(f"{path} is not an idx file (bad magic number)")
    dtypes = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if raw[2] not in dtypes:
        raise DataError(f"{path}: unknown idx element type 0x{raw[2]:02x}")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=dtypes[raw[2]], offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise DataError(f"{path}: header says {shape} but the file holds {data.size} values (truncated?)")
    return data.reshape(shape)


def mnist_images(split: str, data_root: Optional[Union[str, Path]] = None) -> np.ndarray:
    """MNIST grey levels (0..255) of a split, shaped (N, 28, 28), uint8."""
    _check_split("mnist", split)
    path = resolve_data_root(data_root) / "MNIST" / "raw" / _MNIST_FILES[split][0]
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the data root must hold MNIST/raw/{_MNIST_FILES[split][0]}")
    return read_idx(path)


def binarize_stochastic(grey: np.ndarray, generator: torch.Generator) -> Tensor:
    """x ~ Bernoulli(grey / 255) pixel by pixel, as float32 (N, D)."""
    p = torch.from_numpy(grey.reshape(len(grey), -1).astype(np.float32) / 255.0)
    return (torch.rand(p.shape, generator=generator) < p).float()


def pool_and_threshold(grey: np.ndarray, factor: int = 2, threshold: float = 0.5) -> Tensor:
    """Average-pool (N, H, W) grey levels by `factor` and threshold intensities (0..1) at `threshold`."""
    n, h, w = grey.shape
    pooled = grey.reshape(n, h // factor, factor, w // factor, factor).astype(np.float64).mean((2, 4)) / 255.0
    return torch.from_numpy((pooled >= threshold).reshape(n, -1).astype(np.float32))


def read_amat(path: Union[str, Path]) -> Tensor:
    """Read a Larochelle .amat file (rows of space-separated 0/1) as float32 (N, D)."""
    raw = np.fromfile(path, dtype=np.uint8)
    # Fast path for the usual layout, every row "d d ... d\n" of one-character digits: the digits sit at the even
    # byte offsets of equal-length rows (20x faster than loadtxt on the 78 MB training file).
    newlines = np.flatnonzero(raw == ord("\n"))
    if len(newlines) and newlines[-1] == len(raw) - 1 and (len(raw) % (newlines[0] + 1)) == 0:
        rows = raw.reshape(-1, newlines[0] + 1)
        digits = rows[:, 0:-1:2]
        if (rows[:, -1] == ord("\n")).all() and (rows[:, 1:-1:2] == ord(" ")).all() and (digits <= ord("9")).all():
            if (digits >= ord("0")).all():
                return torch.from_numpy((digits - ord("0")).astype(np.float32))
    rows = np.loadtxt(path, dtype=np.float32)
    return torch.from_numpy(np.atleast_2d(rows))


def area_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Exact area-averaging (box filter) weights, float64 (n_out, n_in): entry (i, j) is the fraction of output
    pixel i covered by input pixel j when n_in input pixels and n_out output pixels span the same length. Rows sum
    to 1; `A @ img @ A.T` resizes an (n_in, n_in) image to (n_out, n_out), as an antialiased resize does."""
    counts, per_row = _area_counts(n_in, n_out)
    return counts / per_row


def _area_counts(n_in: int, n_out: int) -> tuple[np.ndarray, int]:
    """`area_matrix` as integers: overlaps (n_out, n_in) in units of 1/(n_out / g) of an input pixel,
    g = gcd(n_in, n_out), and the row sum n_in / g that they are to be divided by."""
    if n_in < 1 or n_out < 1:
        raise ValueError(f"sizes must be positive, got n_in={n_in}, n_out={n_out}")
    g = math.gcd(n_in, n_out)
    # On a grid of n_in * n_out / g cells, input pixel j spans [j * n_out / g, (j + 1) * n_out / g) and output
    # pixel i spans [i * n_in / g, (i + 1) * n_in / g): both are whole cells, so the overlaps are integers.
    step_in, step_out = n_out // g, n_in // g
    lo_in = np.arange(n_in) * step_in
    lo_out = np.arange(n_out)[:, None] * step_out
    overlap = np.minimum(lo_out + step_out, lo_in + step_in) - np.maximum(lo_out, lo_in)
    return np.maximum(overlap, 0).astype(np.float64), step_out


def downsample_area(images: np.ndarray, size: int) -> np.ndarray:
    """Ink fractions of square images (N, S, S) (bool or 0/1) downsampled to (N, size, size) by exact area
    averaging, float64 in [0, 1]: A @ img @ A.T with A = `area_matrix(S, size)`. Computed from integer counts
    (exact in float64 for any summation order), so the result does not depend on the BLAS."""
    if images.ndim != 3 or images.shape[1] != images.shape[2]:
        raise ValueError(f"expected square images shaped (N, S, S), got {images.shape}")
    counts, per_row = _area_counts(images.shape[1], size)
    # 0/1 pixels times integer weights: every partial sum is an integer far below 2**53.
    summed = counts @ images.astype(np.float64) @ counts.T
    return summed / float(per_row * per_row)


def omniglot_split_indices(split: str) -> np.ndarray:
    """Indices (int64, (24345,) for train, (8070,) for test) into the 32,460 Omniglot images in their fixed order
    (background then evaluation characters, each character's 20 drawers in order) of the split's images, in the
    order the split returns them: a fixed-seed legacy RandomState permutation, cut 24,345 / 8,070 / 45 unused."""
    _check_split("omniglot", split)
    n = sum(OMNIGLOT_CHARACTERS) * OMNIGLOT_DRAWERS
    perm = np.random.RandomState(OMNIGLOT_SPLIT_SEED).permutation(n)
    n_train, n_test = OMNIGLOT_SPLIT_SIZES["train"], OMNIGLOT_SPLIT_SIZES["test"]
    # The paper's sizes sum to 32,415, 45 fewer than the images (Burda's file holds 32,415): the last 45 of the
    # permutation are in neither split.
    return perm[:n_train] if split == "train" else perm[n_train : n_train + n_test]


def omniglot_images(data_root: Optional[Union[str, Path]] = None) -> np.ndarray:
    """All 32,460 Omniglot images as bool (32460, 105, 105), True = white background, in the fixed order
    (background characters then evaluation characters, each character's 20 drawers in order)."""
    root = resolve_data_root(data_root)
    parts = []
    for name, n_characters in zip(OMNIGLOT_FILES, OMNIGLOT_CHARACTERS):
        path = root / "omniglot" / name
        if not path.exists():
            raise FileNotFoundError(
                f"{path} is missing: the data root {root} must hold omniglot/{name} (see ../shared/data/README.md)"
            )
        with np.load(path, allow_pickle=False) as z:
            if "images" not in z.files:
                raise DataError(f"{path} holds arrays {z.files}; expected 'images' (n_characters, 20, 105, 105)")
            images = z["images"]
        expected = (n_characters, OMNIGLOT_DRAWERS, OMNIGLOT_SOURCE_SIZE, OMNIGLOT_SOURCE_SIZE)
        if images.shape != expected or images.dtype != np.bool_:
            raise DataError(f"{path}: expected images bool {expected}, got {images.dtype} {images.shape}")
        parts.append(images.reshape(-1, OMNIGLOT_SOURCE_SIZE, OMNIGLOT_SOURCE_SIZE))
    return np.concatenate(parts)


def load_omniglot(split: str, data_root: Optional[Union[str, Path]] = None) -> Tensor:
    """Omniglot 28x28, ink = 1, as float32 (N, 784) in row-major pixel order (construction: module docstring)."""
    index = omniglot_split_indices(split)
    images = omniglot_images(data_root)
    n = len(images)
    # Where each of the n images goes in the split (-1: not in it). The noise is drawn for every image in the
    # fixed order, chunk after chunk of one stream, so that an image's binarization is the same in any split.
    position = np.full(n, -1)
    position[index] = np.arange(len(index))
    out = np.empty((len(index), OMNIGLOT_SIZE, OMNIGLOT_SIZE), dtype=np.float32)
    noise = np.random.RandomState(OMNIGLOT_BINARIZATION_SEED)
    for start in range(0, n, _OMNIGLOT_CHUNK):
        stop = min(start + _OMNIGLOT_CHUNK, n)
        u = noise.random_sample((stop - start, OMNIGLOT_SIZE, OMNIGLOT_SIZE))
        keep = position[start:stop] >= 0
        if keep.any():
            ink = downsample_area(~images[start:stop][keep], OMNIGLOT_SIZE)  # ink = 1
            out[position[start:stop][keep]] = u[keep] < ink
    return torch.from_numpy(out.reshape(len(index), -1))


def _load_digits(split: str, data_root: Optional[Union[str, Path]] = None) -> Tensor:
    with np.load(_PACKAGE_DATA / "digits.npz") as z:
        return torch.from_numpy(z["images"][z[f"{split}_index"]].astype(np.float32))


def _load_mnist(split: str, data_root: Optional[Union[str, Path]] = None) -> Tensor:
    g = torch.Generator().manual_seed(MNIST_BINARIZATION_SEEDS[split])
    return binarize_stochastic(mnist_images(split, data_root), g)


def _load_mnist14(split: str, data_root: Optional[Union[str, Path]] = None) -> Tensor:
    return pool_and_threshold(mnist_images(split, data_root))


def _load_binarized_mnist(split: str, data_root: Optional[Union[str, Path]] = None) -> Tensor:
    path = resolve_data_root(data_root) / "binarized_mnist" / f"binarized_mnist_{split}.amat"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the data root must hold binarized_mnist/{path.name}")
    return read_amat(path)


@dataclass(frozen=True)
class DatasetSpec:
    """A named dataset: its splits and their sizes, the image shape (H, W) of its vectors (None: not images), and
    `load(split, data_root)`, which returns a split as float32 (N, H * W) of 0s and 1s in row-major pixel order
    (`load_dataset` applies the pixel order). `description` is the README table's text (markdown)."""

    name: str
    splits: tuple[str, ...]
    sizes: tuple[int, ...]
    image_shape: Optional[tuple[int, int]]
    load: Callable[[str, Optional[Union[str, Path]]], Tensor]
    description: str

    @property
    def n_units(self) -> Optional[int]:
        return None if self.image_shape is None else self.image_shape[0] * self.image_shape[1]


DATASET_SPECS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            "digits",
            ("train", "test"),
            (1437, 360),
            (8, 8),
            _load_digits,
            "scikit-learn's 8x8 digits (UCI), binarized at half intensity, fixed-seed split; embedded in the "
            "package, see `scripts/make_digits_dataset.py`",
        ),
        DatasetSpec(
            "mnist",
            ("train", "test"),
            (60000, 10000),
            (28, 28),
            _load_mnist,
            "the MNIST idx files, binarized stochastically (pixel/255) with a fixed seed per split",
        ),
        DatasetSpec(
            "mnist14",
            ("train", "test"),
            (60000, 10000),
            (14, 14),
            _load_mnist14,
            "MNIST average-pooled 2x2 to 14x14 and thresholded at 0.5 (the data of `rbm_mnist_small`)",
        ),
        DatasetSpec(
            "binarized_mnist",
            ("train", "valid", "test"),
            (50000, 10000, 10000),
            (28, 28),
            _load_binarized_mnist,
            "Larochelle & Murray's fixed binarization (`.amat`)",
        ),
        DatasetSpec(
            "omniglot",
            ("train", "test"),
            (OMNIGLOT_SPLIT_SIZES["train"], OMNIGLOT_SPLIT_SIZES["test"]),
            (OMNIGLOT_SIZE, OMNIGLOT_SIZE),
            load_omniglot,
            "Omniglot (Lake et al.), area-averaged 105x105 to 28x28, ink = 1, fixed-seed Bernoulli(ink "
            "fraction) binarization, fixed-seed split of the RAISE paper's sizes (recipe in docs/datasets.md)",
        ),
    )
}
# Name -> splits, the older form of the table (kept for callers that test membership or list the names).
DATASETS: dict[str, tuple[str, ...]] = {name: spec.splits for name, spec in DATASET_SPECS.items()}


def dataset_spec(name: str) -> DatasetSpec:
    """The registry row of a named dataset; DataError naming the choices if there is none."""
    if name not in DATASET_SPECS:
        raise DataError(
            f"unknown dataset {name!r}; named datasets are {', '.join(DATASET_SPECS)} (or give a .npy/.npz file)"
        )
    return DATASET_SPECS[name]


def check_pixel_order(pixel_order: str, name: Optional[str] = None) -> None:
    """DataError unless `pixel_order` is one of PIXEL_ORDERS and, for "fortran", dataset `name` (if given) is made
    of square images."""
    if pixel_order not in PIXEL_ORDERS:
        raise DataError(f"pixel order must be one of {', '.join(PIXEL_ORDERS)}, not {pixel_order!r}")
    if pixel_order == "fortran" and name is not None:
        shape = dataset_spec(name).image_shape
        if shape is None or shape[0] != shape[1]:
            what = "not made of images" if shape is None else f"made of {shape[0]}x{shape[1]} images, not square ones"
            raise DataError(f"dataset {name!r} is {what}: it has no Fortran pixel order; use row-major")


def check_dataset_request(name: str, split: str = "test", pixel_order: str = "row-major") -> None:
    """What `load_dataset` checks before reading anything: DataError (naming the choices) for an unknown dataset,
    a split it does not have, or a pixel order it cannot take."""
    dataset_spec(name)
    _check_split(name, split)
    check_pixel_order(pixel_order, name)


def to_pixel_order(data: Tensor, image_shape: tuple[int, int], pixel_order: str) -> Tensor:
    """Row-major flattened images (N, H * W) in `pixel_order`: unchanged for "row-major"; for "fortran" each image
    transposed before flattening (column c * H + r holds pixel (r, c))."""
    check_pixel_order(pixel_order)
    if pixel_order == "row-major":
        return data
    h, w = image_shape
    return data.reshape(len(data), h, w).transpose(1, 2).reshape(len(data), h * w).contiguous()


def load_dataset(
    name: str,
    split: str = "test",
    data_root: Optional[Union[str, Path]] = None,
    pixel_order: str = "row-major",
) -> Tensor:
    """A named dataset split (see `DATASET_SPECS` and the module docstring) as float32 (N, D) with values 0 and 1,
    each image flattened in `pixel_order` ("row-major", or "fortran": each image transposed before flattening, the
    order of Burda's Omniglot and of the Omniglot RBMs in ../shared/data/checkpoints)."""
    check_dataset_request(name, split, pixel_order)
    spec = DATASET_SPECS[name]
    data = spec.load(split, data_root)
    return data if spec.image_shape is None else to_pixel_order(data, spec.image_shape, pixel_order)


def dataset_files(name: str, split: str = "test", data_root: Optional[Union[str, Path]] = None) -> list[Path]:
    """The files `load_dataset(name, split, data_root)` reads, so that a command can refuse an output path that
    would overwrite one; [] when no data root is found (then nothing is read either)."""
    check_dataset_request(name, split)
    if name == "digits":
        return [_PACKAGE_DATA / "digits.npz"]
    try:
        root = resolve_data_root(data_root)
    except FileNotFoundError:
        return []
    if name in ("mnist", "mnist14"):
        return [root / "MNIST" / "raw" / _MNIST_FILES[split][0]]
    if name == "binarized_mnist":
        return [root / "binarized_mnist" / f"binarized_mnist_{split}.amat"]
    return [root / "omniglot" / file for file in OMNIGLOT_FILES]  # omniglot: every split reads both files


def dataset_table() -> str:
    """The README's markdown table of the named datasets, made from `DATASET_SPECS`."""
    rows = ["| name | units | splits | what |", "|---|---|---|---|"]
    for spec in DATASET_SPECS.values():
        units = "" if spec.image_shape is None else f"{spec.n_units} ({spec.image_shape[0]}x{spec.image_shape[1]})"
        splits = ", ".join(f"{s} ({n:,})" for s, n in zip(spec.splits, spec.sizes))
        rows.append(f"| `{spec.name}` | {units} | {splits} | {spec.description} |")
    return "\n".join(rows)


def _check_split(name: str, split: str) -> None:
    splits = dataset_spec(name).splits
    if split not in splits:
        raise DataError(f"dataset {name!r} has splits {', '.join(splits)}, not {split!r}")
