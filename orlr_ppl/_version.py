"""The package version: one place, read by setuptools, ``orlr_ppl.__version__`` and saved models."""

__version__ = "0.1.0"
