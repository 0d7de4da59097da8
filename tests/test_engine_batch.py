"""``query_many``: one DataFrame over several traces with a ``trace`` column."""
from __future__ import annotations

import pytest

from support.engine_support import fixture_trace, requires_portable, x_counts_by_cat
from perfetto_graph_ann.errors import InputError, QueryError
from perfetto_graph_ann.query.batch import query_many
from perfetto_graph_ann.query.engine import process

pytestmark = requires_portable

NAMES = ["seed_block_graph", "two_branch", "allreduce_eager_rank0"]
SQL = "SELECT category, COUNT(*) AS n FROM slice WHERE category = 'kernel' GROUP BY category"


def test_same_sql_over_many_traces():
    before = set(process.live_pids())
    paths = [fixture_trace(n) for n in NAMES]
    df = query_many(paths, SQL, engine="portable", max_workers=2)
    assert list(df.columns) == ["trace", "category", "n"]
    assert list(df["trace"]) == [str(p) for p in paths]
    assert list(df["n"]) == [x_counts_by_cat(n)["kernel"] for n in NAMES]
    assert set(process.live_pids()) <= before  # engines other tests keep open are not ours


def test_first_failure_is_raised_and_nothing_remains(tmp_path):
    before = set(process.live_pids())
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises((InputError, QueryError)) as info:
        query_many([fixture_trace(NAMES[0]), bad], SQL, engine="portable", max_workers=2)
    assert str(bad) in str(info.value)
    assert set(process.live_pids()) <= before  # engines other tests keep open are not ours


def test_sql_error_names_a_trace():
    before = set(process.live_pids())
    with pytest.raises(QueryError, match="no such table: nope"):
        query_many([fixture_trace(n) for n in NAMES[:2]], "SELECT * FROM nope", engine="portable")
    assert set(process.live_pids()) <= before  # engines other tests keep open are not ours


def test_no_traces_gives_an_empty_frame():
    assert list(query_many([], SQL).columns) == ["trace"]
