"""``query_many`` on ``concurrent.futures`` executors, with sidecars converted on the worker,
and the Arrow transport of task results (no Ray needed)."""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing

import pandas as pd
import pytest

from support.engine_support import requires_portable
from support.fleet_synth import LIVE, sidecar
from perfetto_graph_ann.errors import InputError, QueryError
from perfetto_graph_ann.pipeline.fleet import query_many
from perfetto_graph_ann.query.engine import EngineConfig
from perfetto_graph_ann.query.tasks import FileInput, NotVisible, TraceTask, run_trace_task, to_arrow, to_frame

PORTABLE = EngineConfig(engine="portable")
TRACES = [LIVE / f"allreduce_graph_rank{r}.trace.json.gz" for r in (1, 0)]
SIDECARS = [LIVE / f"allreduce_graph_rank{r}.annotations.json" for r in (1, 0)]
COLL_SQL = ("INCLUDE PERFETTO MODULE graph_ann.collectives; "
            "SELECT pg_desc, pg_ranks, group_size, msg_bytes, is_graphed FROM graph_ann_collective ORDER BY ts")


@requires_portable
def test_sidecars_are_joined_on_the_worker_and_executors_agree():
    ann = sidecar(0)["graphs"][0]["nodes"][2]["annotation"]
    local = query_many(TRACES, COLL_SQL, config=PORTABLE, annotations=SIDECARS, progress=False)
    # restored collective fields, from the sidecar (the NCCL kernels of the JSON carry none)
    assert local["pg_desc"].tolist() == [ann["Process Group Description"]] * 10
    assert local["pg_ranks"].tolist() == [ann["Process Group Ranks"]] * 10
    assert local["msg_bytes"].tolist() == [ann["In msg nelems"] * 4] * 10  # Float
    assert local["trace"].tolist() == [str(TRACES[0])] * 5 + [str(TRACES[1])] * 5
    with cf.ThreadPoolExecutor(2) as pool:
        threads = query_many(TRACES, COLL_SQL, config=PORTABLE, annotations=SIDECARS, executor=pool, progress=False)
    with cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        procs = query_many(TRACES, COLL_SQL, config=PORTABLE, annotations=SIDECARS, executor=pool,
                           max_workers=1, progress=False)
    pd.testing.assert_frame_equal(threads, local, check_exact=True)
    pd.testing.assert_frame_equal(procs, local, check_exact=True)


@requires_portable
def test_a_failure_in_another_process_names_its_trace(tmp_path):
    bad = tmp_path / "bad.trace.json"
    bad.write_text("{not json")
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        with pytest.raises(InputError) as info:
            query_many([TRACES[0], bad], "SELECT 1 AS one", config=PORTABLE, annotations=[None, SIDECARS[0]],
                       executor=pool, progress=False)
    assert info.value.path == str(bad) and str(info.value).startswith(f"{bad}: ")
    with cf.ThreadPoolExecutor(1) as pool:
        with pytest.raises(QueryError, match=f"(?s)^{TRACES[0]}: .*no such table: nope"):
            query_many([TRACES[0]], "SELECT * FROM nope", config=PORTABLE, executor=pool, progress=False)


def test_a_file_the_worker_cannot_see_is_reported_not_guessed(tmp_path):
    f = tmp_path / "t.json"
    f.write_text("{}")
    seen = FileInput.of(f)
    assert seen.visible() and seen.size == 2
    task = TraceTask(0, FileInput(str(f), 3), {"": "SELECT 1"}, PORTABLE)  # same path, other size
    assert run_trace_task(task) == NotVisible(0, [str(f)])


def test_arrow_round_trip_keeps_values_and_dtypes():
    pytest.importorskip("pyarrow")
    big = 2 ** 62 + 1
    frame = pd.DataFrame({
        "ints": pd.Series([1, big], dtype="int64"),
        "nullable": pd.array([big, None], dtype="Int64"),
        "floats": [0.5, float("nan")],
        "text": pd.Series(["a", None]).infer_objects(),
        "nulls": pd.Series([None, None], dtype=object),
        "blob": [b"\x00\x01", None],
    })
    table = to_arrow(frame)
    assert not isinstance(table, pd.DataFrame)
    pd.testing.assert_frame_equal(to_frame(table), frame, check_exact=True)
    mixed = pd.DataFrame({"m": pd.Series([1, "x"], dtype=object)})  # SQLite columns may mix types
    assert to_arrow(mixed) is mixed


def test_bad_executor_and_annotation_lists():
    with pytest.raises(ValueError, match="executor must be"):
        query_many(TRACES, "SELECT 1", executor="dask", progress=False)
    with pytest.raises(ValueError, match="1 annotation entries for 2 traces"):
        query_many(TRACES, "SELECT 1", annotations=[SIDECARS[0]])


@requires_portable
def test_a_missing_trace_is_an_input_error_naming_it(tmp_path):
    missing = tmp_path / "gone.pftrace"
    with pytest.raises(InputError, match=f"^{missing}: no such file"):
        query_many([missing], "SELECT 1", config=PORTABLE, progress=False)
