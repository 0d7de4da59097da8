"""GPU tests and scripts (a package so its conftest does not shadow tests/conftest.py)."""
