"""``open_converted(..., sql_args_only=True)`` (what ``report`` and ``lanes`` use for a JSON
input): only the args the SQL package reads are written, and every report table is the same
as from the full conversion."""
from __future__ import annotations

import io

import pytest

from conftest import TRACES, fixture_capture, fixture_trace
from support.engine_support import requires_portable
from support.pftrace_decode import decode
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.join import join
from perfetto_graph_ann.query import metrics
from perfetto_graph_ann.query.engine import EngineConfig
from perfetto_graph_ann.pipeline.query import open_converted
from perfetto_graph_ann.query.session import sql_arg_names
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.write.perfetto import WriterConfig, write_perfetto


def test_sql_arg_names_come_from_the_modules(tmp_path):
    names = sql_arg_names(EngineConfig().package_dirs())
    assert {"correlation", "device", "stream", "graph id", "replay", "Collective name", "In msg nelems"} <= names
    assert "grid" not in names and "External id" not in names
    (tmp_path / "m.sql").write_text("SELECT EXTRACT_ARG(arg_set_id, 'debug.foo bar'), EXTRACT_ARG(a, 'args.baz');")
    assert sql_arg_names([tmp_path]) == {"foo bar", "baz"}


def test_kept_args_are_byte_identical_across_encoders():
    trace = read_trace(fixture_trace("allreduce_eager_rank0"))
    keep = frozenset({"correlation", "device", "Collective name", "est_ achieved occupancy %"})
    fast, ref = io.BytesIO(), io.BytesIO()
    write_perfetto(trace, fast, None, WriterConfig(encoder="fast", keep_args=keep, progress=False))
    write_perfetto(trace, ref, None, WriterConfig(encoder="protos", keep_args=keep, progress=False))
    assert fast.getvalue() == ref.getvalue()


def test_kept_args_decode(tmp_path):
    trace = read_trace(fixture_trace("allreduce_eager_rank0"))
    keep = frozenset({"correlation", "device", "Collective name", "est_ achieved occupancy %"})
    out = tmp_path / "a.pftrace"
    with open(out, "wb") as f:
        write_perfetto(trace, f, None, WriterConfig(keep_args=keep, progress=False))
    slices = decode(out).slices
    by = {(s.name, s.ts): s.args for s in slices}
    checked = 0
    for e in trace.events:
        if e.ph == "X" and e.args and (e.name, e.ts_ns) in by:
            exp = {k: v for k, v in e.args.items() if k in keep or k.replace(".", "_") in keep}
            assert set(by[(e.name, e.ts_ns)]) == set(exp)
            checked += bool(exp)
    assert checked > 50
    assert any("est. achieved occupancy %" in a for a in by.values())


def _report(trace, layout, sql_args_only):
    with open_converted(trace, layout, engine="portable", sql_args_only=sql_args_only) as s:
        return metrics.report(s)


@requires_portable
@pytest.mark.parametrize("name", TRACES)
def test_report_tables_are_the_same(name):
    trace = read_trace(fixture_trace(name))
    layout = None
    if name in ("seed_block_annotated", "two_branch"):
        layout = join(trace, read_capture_record(fixture_capture(name)))
    full, slim = _report(trace, layout, False), _report(trace, layout, True)
    assert list(full) == list(slim)
    for k in full:
        assert full[k].equals(slim[k]), k
    assert sum(len(v) for v in full.values()) > 0


@requires_portable
def test_feeder_hands_the_engines_error_to_the_writer(tmp_path):
    from perfetto_graph_ann.errors import InputError
    from perfetto_graph_ann.query.engine import create_engine
    from perfetto_graph_ann.query.session import _Feeder

    path = tmp_path / "t.pftrace"
    path.write_bytes(b"")
    eng = create_engine(path, EngineConfig(engine="portable"))
    try:
        with pytest.raises(InputError, match="t.pftrace"):
            with _Feeder(eng, 64) as feeder:
                for _ in range(200):  # more pieces than the queue holds: must never block
                    feeder.write(b"\xff" * 64)
    finally:
        eng.close()

