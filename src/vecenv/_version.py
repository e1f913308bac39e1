"""The one place the version is written (``vecenv.__version__``; pyproject.toml reads it here)."""
__version__ = "0.1.0"
