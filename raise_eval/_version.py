"""The package version (its own module, so that the package's modules can import it without a cycle)."""

__version__ = "0.3.0"
