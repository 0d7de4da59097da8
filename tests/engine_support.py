"""Helpers shared by the tests/test_engine_*.py files (not a test module)."""
from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from pathlib import Path
from typing import Optional

import pytest

from perfetto_graph_ann._resources import demo_data_dir
from perfetto_graph_ann.errors import EngineNotFoundError
from perfetto_graph_ann.query.engine import EngineConfig, choose_engine

FIXTURES = demo_data_dir()


def fixture_trace(name: str) -> Path:
    return FIXTURES / f"{name}.trace.json.gz"


def load_json(name: str) -> dict:
    with gzip.open(fixture_trace(name), "rt", encoding="utf-8") as f:
        return json.load(f)


def x_counts_by_cat(name: str) -> Counter:
    """Complete ('X') events per category, straight from the fixture JSON."""
    return Counter(e.get("cat") for e in load_json(name)["traceEvents"] if e.get("ph") == "X")


def portable_reason() -> Optional[str]:
    """Why the portable engine cannot run here, or None when it can."""
    try:
        choose_engine(EngineConfig(engine="portable"))
    except EngineNotFoundError as e:
        return f"portable engine unavailable: {e}"
    return None


requires_portable = pytest.mark.skipif(portable_reason() is not None, reason=str(portable_reason()))


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
