"""Regenerate raise_eval/data/digits.npz, the embedded default dataset, from scikit-learn's bundled digits.

scikit-learn ships the UCI "Optical Recognition of Handwritten Digits" test set (1,797 images of 8x8 pixels with
values 0..16; BSD-3 licence for scikit-learn, CC BY 4.0 for the UCI data). We binarize at half intensity
(value >= 8 -> 1), keep row-major pixel order, and split with a fixed permutation (seed 0) into 1,437 training
and 360 test images. The file holds `images` (uint8, 1797 x 64), `labels` (uint8) and the `train_index` and
`test_index` arrays. Only this script needs scikit-learn (`pip install scikit-learn`); the library reads the npz.

    python scripts/make_digits_dataset.py
"""

import io
from pathlib import Path

import numpy as np
from _common import write_output

OUT = Path(__file__).resolve().parents[1] / "raise_eval" / "data" / "digits.npz"


def main() -> None:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.data >= 8).astype(np.uint8)  # (1797, 64), values 0..16 -> {0, 1}
    labels = digits.target.astype(np.uint8)
    perm = np.random.default_rng(0).permutation(len(images))
    n_test = 360
    test_index, train_index = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    buffer = io.BytesIO()  # written whole or not at all: the library's default dataset is never left half-written
    np.savez_compressed(buffer, images=images, labels=labels, train_index=train_index, test_index=test_index)
    write_output(OUT, buffer.getvalue(), what="the digits", keep_on_failure=False)
    print(
        f"wrote {OUT}: {len(train_index)} train / {len(test_index)} test images of {images.shape[1]} pixels, "
        f"mean pixel {images.mean():.3f}"
    )


if __name__ == "__main__":
    main()
