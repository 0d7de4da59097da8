"""``open_json`` (what ``report`` uses for a JSON trace): the engine starts first, the JSON
is read, joined and converted inside the feed, and the read trace is freed once its packets
are sent. Same tables as reading first and converting after (``open_converted``), errors name
the user's file, and nothing is left running."""
from __future__ import annotations

import gc
import gzip
import weakref

import pytest

from conftest import fixture_capture, fixture_trace
from support.engine_support import requires_portable
from perfetto_graph_ann.errors import TraceFormatError
from perfetto_graph_ann.pipeline.convert import join_files
from perfetto_graph_ann.pipeline import query as pq
from perfetto_graph_ann.pipeline.query import open_converted, open_json
from perfetto_graph_ann.query import metrics
from perfetto_graph_ann.read.kineto import read_trace
import perfetto_graph_ann.query.session as session_mod


@requires_portable
@pytest.mark.parametrize("name,annotated", [("two_branch", True), ("allreduce_eager_rank0", False)])
def test_same_tables_as_reading_first(name, annotated):
    src = fixture_trace(name)
    trace = read_trace(src)
    paths = [str(fixture_capture(name))] if annotated else []
    layout = join_files(trace, paths)[0] if annotated else None  # what report did before
    with open_converted(trace, layout, engine="portable", sql_args_only=True) as s:
        before = metrics.report(s)
    joined = []
    with open_json(str(src), paths, engine="portable",
                   sql_args_only=True, on_join=joined.append) as s:
        assert str(s.path) == str(src)
        after = metrics.report(s)
    assert len(joined) == annotated
    assert list(before) == list(after)
    for k in before:
        assert before[k].equals(after[k]), k
    assert sum(len(v) for v in before.values()) > 0


@requires_portable
def test_the_read_trace_is_freed_before_the_session_and_the_collector_restored(monkeypatch):
    refs = []
    real = pq.read_and_join

    def spy(*a, **k):
        joined = real(*a, **k)
        refs.append(weakref.ref(joined.trace))
        assert not gc.isenabled()  # reading and converting run with the collector paused
        return joined

    monkeypatch.setattr(pq, "read_and_join", spy)
    assert gc.isenabled()
    with open_json(str(fixture_trace("two_branch")), engine="portable") as s:
        assert refs and refs[0]() is None
        assert gc.isenabled()
        assert s.query("SELECT COUNT(*) AS n FROM slice").df()["n"][0] > 0


@requires_portable
def test_a_bad_json_names_the_file_and_stops_the_engine(tmp_path, started_engines):
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "ts": 1.0'))
    with pytest.raises(TraceFormatError, match="bad.json.gz"):
        with open_json(str(bad), engine="portable"):
            pass
    assert len(started_engines) == 1 and started_engines[0].pid is None
    assert gc.isenabled()


@requires_portable
@pytest.mark.parametrize("opener", ["open_json", "open_converted"])
def test_a_failing_conversion_stops_the_engine(monkeypatch, started_engines, opener):
    def boom(trace, out, layout, config):
        out.write(b"\x0a\x00")
        raise RuntimeError("writer failed")

    monkeypatch.setattr(pq, "write_pftrace_stream", boom)
    path = fixture_trace("two_branch")
    session = open_json(str(path), engine="portable") if opener == "open_json" else \
        open_converted(read_trace(path), engine="portable")
    with pytest.raises(RuntimeError, match="writer failed"):
        with session:
            pass
    assert len(started_engines) == 1 and started_engines[0].pid is None


@requires_portable
def test_a_closed_feeder_refuses_more_bytes(tmp_path):
    from perfetto_graph_ann.query.engine import EngineConfig, create_engine
    from perfetto_graph_ann.query.session import _Feeder

    path = tmp_path / "t.pftrace"
    path.write_bytes(b"")
    src = _pftrace(tmp_path)
    eng = create_engine(path, EngineConfig(engine="portable"))
    try:
        with _Feeder(eng, 64) as feeder:
            feeder.write(src.read_bytes())
            feeder.close()
            feeder.close()  # idempotent
            with pytest.raises(ValueError, match="closed"):
                feeder.write(b"\x00")
        assert eng.query("SELECT COUNT(*) AS n FROM slice").as_pandas_dataframe()["n"][0] > 0
    finally:
        eng.close()


def test_one_large_write_is_fed_in_pieces_the_engine_takes():
    """diff writes two merged runs in one call (223 MB at 1M kernels each): the engine refuses
    a message over 64 MiB, so the feeder cuts what it queues to ``chunk_bytes``."""
    from perfetto_graph_ann.query.session import _Feeder, _Starting

    got = []

    class Engine:
        def load_chunks(self, pieces):
            got.extend(pieces)

    data = bytes(range(256)) * 40  # 10,240 bytes
    with _Feeder(_Starting.started(Engine()), 1000) as feeder:
        feeder.write(b"ab")
        feeder.write(data)
        feeder.write(b"cd")
        feeder.close()
    assert b"".join(got) == b"ab" + data + b"cd"
    assert max(len(p) for p in got) <= 1000 * 2 and len(got) >= 10


@requires_portable
def test_the_feed_runs_while_the_engine_starts(monkeypatch, tmp_path):
    import threading

    fed = threading.Event()
    real_create = session_mod.create_engine
    seen = []
    data = _pftrace(tmp_path).read_bytes()

    def create(*a, **k):
        seen.append(fed.wait(10))  # started in the background: the feed begins meanwhile
        return real_create(*a, **k)

    def feed(sink):
        fed.set()
        sink.write(data)

    monkeypatch.setattr(session_mod, "create_engine", create)
    with session_mod.open_fed(feed, engine="portable") as s:
        assert s.query("SELECT COUNT(*) AS n FROM slice").df()["n"][0] > 0
    assert seen == [True]


@requires_portable
def test_an_engine_that_fails_to_start_is_said_and_the_feed_stops(monkeypatch, tmp_path):
    from perfetto_graph_ann.errors import EngineError

    def create(path, *a, **k):
        raise EngineError(f"{path}: cannot start")

    monkeypatch.setattr(session_mod, "create_engine", create)
    src = fixture_trace("two_branch")
    with pytest.raises(EngineError) as info:
        with open_json(str(src), engine="portable"):
            pass
    assert str(info.value) == f"{src}: cannot start"  # the user's file, not the placeholder
    assert gc.isenabled()



def _pftrace(tmp_path):
    from perfetto_graph_ann.write.pftrace import write_pftrace

    path = tmp_path / "src.pftrace"
    write_pftrace(read_trace(fixture_trace("two_branch")), path)
    return path
