"""The package's version: a leaf module, so any layer may name it without importing the facade."""

__all__ = ["__version__"]

__version__ = "0.1.0"
