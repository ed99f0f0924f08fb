"""The package version (pyproject.toml says the same; a test keeps them equal)."""

__version__ = "0.1.0"
