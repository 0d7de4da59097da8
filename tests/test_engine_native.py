"""The native engine on a real ``trace_processor_shell``, when this machine has one.

Skipped with the reason otherwise (CI has no network to download one); the same SQL,
loader and error handling run through the portable engine in test_engine_portable.py /
test_engine_robustness.py, and resolution is tested with fake binaries in
test_engine_resolve.py.
"""
from __future__ import annotations

import pytest

from support.engine_support import SLOW_SQL, fixture_trace, native_reason, pid_alive, sigkill_after, x_counts_by_cat
from perfetto_graph_ann.errors import EngineError, QueryError
from perfetto_graph_ann.query.batch import query_many
from perfetto_graph_ann.query.session import open_trace

pytestmark = [
    pytest.mark.native,
    pytest.mark.skipif(native_reason() is not None,
                       reason=f"{native_reason()}; the portable engine tests cover the same SQL"),
]

GRAPH = fixture_trace("seed_block_graph")


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
    try:
        with sigkill_after(pid), pytest.raises(EngineError, match="died during the query"):
            s.query(SLOW_SQL)
    finally:
        s.close()
    assert not pid_alive(pid)


def test_native_batch():
    names = ["seed_block_graph", "two_branch"]
    df = query_many([fixture_trace(n) for n in names], "SELECT COUNT(*) AS n FROM slice WHERE category = 'kernel'", engine="native")
    assert list(df["n"]) == [x_counts_by_cat(n)["kernel"] for n in names]
