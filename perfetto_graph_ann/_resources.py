"""Where the bundled SQL package, proto schemas and demo recordings live.

In a wheel, ``sql/`` and ``protos/`` are installed inside the package; in a source
checkout (editable install, tests) they sit at the repository root.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["demo_data_dir", "demo_live_data_dir", "protos_dir", "sql_package_dir"]

_PKG = Path(__file__).resolve().parent


def _find(name: str) -> Path:
    for candidate in (_PKG / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"bundled folder {name!r} not found next to {_PKG}; the install is incomplete")


def sql_package_dir() -> Path:
    """The ``graph_ann`` PerfettoSQL package directory (its name is the package name)."""
    return _find("sql") / "graph_ann"


def protos_dir() -> Path:
    """The folder holding this project's ``.proto`` schemas."""
    return _find("protos")


def demo_data_dir() -> Path:
    """The real H200 recordings shipped with the package (the demo's embedded default)."""
    return _PKG / "demo" / "data" / "h200"


def demo_live_data_dir() -> Path:
    """Recordings this package's own live demo made on an H200 (annotated all_reduce, 2 ranks)."""
    return _PKG / "demo" / "data" / "h200_live"
