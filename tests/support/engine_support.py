"""Helpers shared by the tests that run a trace processor (not a test module)."""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Iterator, Optional

import pytest

from perfetto_graph_ann._resources import demo_data_dir
from perfetto_graph_ann.errors import EngineNotFoundError
from perfetto_graph_ann.query.engine import EngineConfig, choose_engine
from perfetto_graph_ann.query.engine.config import ENV_SHELL
from perfetto_graph_ann.query.engine.resolve import _Explicit, find_local_shell

FIXTURES = demo_data_dir()

# Counts to 10^10 one row at a time: minutes of work for the engine, so it is still busy
# when the test kills it or the timeout fires.
SLOW_SQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000000) SELECT COUNT(*) FROM c"


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


def native_reason() -> Optional[str]:
    """Why no real native ``trace_processor_shell`` can run here, or None when one can."""
    try:
        found = find_local_shell(EngineConfig(engine="native"), [])
    except _Explicit as e:  # an explicitly configured but broken shell
        return f"native shell unusable: {e.attempt}"
    if found is None:
        return f"no local trace_processor_shell (set {ENV_SHELL}, put one on PATH, or fill the perfetto prebuilt cache)"
    return None


@contextlib.contextmanager
def sigkill_after(pid: int, seconds: float = 0.5) -> Iterator[None]:
    """SIGKILL ``pid`` ``seconds`` into the block, unless the block ended first."""
    timer = threading.Timer(seconds, os.kill, (pid, signal.SIGKILL))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    """Whether ``pid`` is gone (or a zombie) within ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


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
