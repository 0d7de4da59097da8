"""The native engine on a real ``trace_processor_shell``, when this machine has one.

Skipped with the reason otherwise (CI has no network to download one); the same SQL,
loader and error handling run through the portable engine in test_engine_portable.py /
test_engine_robustness.py, and resolution is tested with fake binaries in
test_engine_resolve.py.
"""
from __future__ import annotations

import os
import signal
import threading

import pytest

from engine_support import fixture_trace, pid_alive, x_counts_by_cat
from perfetto_graph_ann.errors import EngineError, QueryError
from perfetto_graph_ann.query.batch import query_many
from perfetto_graph_ann.query.engine import EngineConfig
from perfetto_graph_ann.query.engine.config import ENV_SHELL
from perfetto_graph_ann.query.engine.resolve import _Explicit, find_local_shell
from perfetto_graph_ann.query.session import open_trace


def _local_shell():
    try:
        return find_local_shell(EngineConfig(engine="native"), [])
    except _Explicit:
        return None


SHELL = _local_shell()
pytestmark = [
    pytest.mark.native,
    pytest.mark.skipif(
        SHELL is None,
        reason=f"no local trace_processor_shell (set {ENV_SHELL}, put one on PATH, or fill the perfetto prebuilt cache); "
        "the portable engine tests cover the same SQL",
    ),
]

GRAPH = fixture_trace("seed_block_graph")
SLOW_SQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000000) SELECT COUNT(*) FROM c"


def test_native_counts_and_graph_ann_module():
    with open_trace(GRAPH, engine="native") as s:
        assert s.engine_kind == "native"
        n = s.query("INCLUDE PERFETTO MODULE graph_ann.gpu_work; SELECT COUNT(*) AS n FROM graph_ann_gpu_work").rows[0].n
        assert n == x_counts_by_cat("seed_block_graph")["kernel"]
        with pytest.raises(QueryError, match="no such table"):
            s.query("SELECT * FROM nope")


def test_native_killed_mid_query():
    s = open_trace(GRAPH, engine="native")
    pid = s.engine.pid
    timer = threading.Timer(0.5, os.kill, (pid, signal.SIGKILL))
    timer.start()
    try:
        with pytest.raises(EngineError, match="died during the query"):
            s.query(SLOW_SQL)
    finally:
        timer.cancel()
        s.close()
    assert not pid_alive(pid)


def test_native_batch():
    names = ["seed_block_graph", "two_branch"]
    df = query_many([fixture_trace(n) for n in names], "SELECT COUNT(*) AS n FROM slice WHERE category = 'kernel'", engine="native")
    assert list(df["n"]) == [x_counts_by_cat(n)["kernel"] for n in names]
