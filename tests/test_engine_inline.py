"""Inlined graph_ann SQL (for Bigtrace / engines without our package) gives the same rows
as INCLUDE on an engine with the package registered."""
from __future__ import annotations

import pandas as pd
import pytest

from support.engine_support import fixture_trace, requires_portable
from perfetto_graph_ann.errors import QueryError
from perfetto_graph_ann.query.engine import EngineConfig
from perfetto_graph_ann.query.engine.inline import inline_sql
from perfetto_graph_ann.query.session import open_trace



@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """The annotated seed block converted to our .pftrace (GPU lanes as tracks)."""
    from perfetto_graph_ann.pipeline.convert import convert

    out = tmp_path_factory.mktemp("inline") / "seed_block_annotated.pftrace"
    convert(fixture_trace("seed_block_annotated"), out)
    return out


@requires_portable
@pytest.mark.parametrize(
    "sql",
    [
        "INCLUDE PERFETTO MODULE graph_ann.gpu_work;\nSELECT * FROM graph_ann_gpu_work ORDER BY id",
        "INCLUDE PERFETTO MODULE graph_ann.lanes;\nINCLUDE PERFETTO MODULE graph_ann.gpu_work;\nSELECT * FROM graph_ann_lane ORDER BY 1, 2",
    ],
)
def test_inlined_sql_runs_without_the_package_and_agrees(sql, trace):
    with open_trace(trace, engine="portable") as with_pkg:
        expected = with_pkg.query(sql).df()
    with open_trace(trace, engine="portable", config=EngineConfig(sql_packages=[])) as bare:
        with pytest.raises(QueryError):
            bare.query(sql)  # the package really is absent here
        got = bare.query(inline_sql(sql)).df()
    assert len(expected) > 0
    pd.testing.assert_frame_equal(got, expected)


def test_dependencies_first_once_and_stdlib_kept(tmp_path):
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "a.sql").write_text("CREATE PERFETTO TABLE p_a AS SELECT 1 AS x;\n")
    (pkg / "b.sql").write_text("INCLUDE PERFETTO MODULE p.a;\nINCLUDE PERFETTO MODULE slices.with_context;\nCREATE PERFETTO VIEW p_b AS SELECT x FROM p_a;\n")
    out = inline_sql("INCLUDE PERFETTO MODULE p.b;\ninclude perfetto module p.a;\nSELECT * FROM p_b", [pkg])
    assert out.index("CREATE PERFETTO TABLE p_a") < out.index("CREATE PERFETTO VIEW p_b")
    assert out.count("CREATE PERFETTO TABLE p_a") == 1
    assert "INCLUDE PERFETTO MODULE slices.with_context;" in out
    assert out.rstrip().endswith("SELECT * FROM p_b")


def test_unknown_module_and_cycles_are_errors(tmp_path):
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "a.sql").write_text("INCLUDE PERFETTO MODULE p.b;\n")
    (pkg / "b.sql").write_text("INCLUDE PERFETTO MODULE p.a;\n")
    with pytest.raises(QueryError, match="p.nope: no such module"):
        inline_sql("INCLUDE PERFETTO MODULE p.nope;", [pkg])
    with pytest.raises(QueryError, match="include each other"):
        inline_sql("INCLUDE PERFETTO MODULE p.a;", [pkg])
