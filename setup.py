"""Packaging for raise-eval: the `raise_eval` library, the repository's models/ folder installed as
`raise_eval.models` (no top-level `models` package that could shadow a user's own), and the `raise-eval` command."""

from setuptools import find_packages, setup

setup(
    name="raise-eval",
    version="0.3.0",
    description=(
        "Trustworthy log-likelihoods for deep generative models: AIS, RAISE and bidirectional Monte Carlo in PyTorch"
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=find_packages(include=["raise_eval", "raise_eval.*"])
    + ["raise_eval.models"]
    + [f"raise_eval.models.{name}" for name in find_packages(where="models")],
    package_dir={"raise_eval.models": "models"},
    # models/native/: C sources compiled on first use (raise_eval.models.native)
    package_data={"raise_eval": ["data/*.npz"], "raise_eval.models": ["native/*.c", "native/*.h"]},
    # torch>=2.0 admits the CPU wheel 2.13.0 that .ci/run installs first, so pip installs nothing more.
    install_requires=["torch>=2.0", "numpy>=1.22", "tqdm>=4.60"],
    extras_require={
        # matplotlib: the plot paths are tested; lightning: SandwichCallback runs in a real Trainer; scipy: the MAT
        # reader is cross-checked against scipy.io.loadmat (tests/models/test_checkpoints.py).
        # h5py: the rbms HDF5 reader's tests build files in rbms' layout (tests/models/test_rbms_files.py).
        "test": ["pytest>=7", "matplotlib>=3.5", "lightning>=2.0", "scipy>=1.8", "h5py>=3.0"],
        "plot": ["matplotlib>=3.5"],
        "lightning": ["lightning>=2.0"],  # raise_eval.lightning.SandwichCallback
        "vision": ["torchvision"],
        "hdf5": ["h5py>=3.0"],  # DsysDML/rbms training runs (.h5), models/io/rbms_files.py
        # mkdocs.yml's site; 1.6 brought the anchor validation that `mkdocs build --strict` relies on (.ci/run).
        # Pygments: code highlighted at build time (the codehilite extension), so the site needs no CDN.
        "docs": ["mkdocs==1.6.1", "Pygments>=2.12"],
    },
    entry_points={"console_scripts": ["raise-eval=raise_eval.cli:main"]},
)
