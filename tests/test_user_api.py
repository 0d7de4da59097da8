"""The Python API as a daily user calls it: timeouts that cannot work are refused up front
with ValueError (before, inf crashed deep in a socket or lock with OverflowError, nan and 0
stopped the engine or server at once)."""
from __future__ import annotations

import math

import pytest

from conftest import fixture_trace
from support.engine_support import requires_portable
from perfetto_graph_ann.query.engine.config import EngineConfig
from perfetto_graph_ann.serve import ServeConfig

BAD = [0, -1, math.nan, math.inf, "5", True]


@pytest.mark.parametrize("field", ["start_timeout_s", "load_timeout_s", "query_timeout_s"])
@pytest.mark.parametrize("value", BAD)
def test_engine_config_refuses_unusable_timeouts(field, value):
    with pytest.raises(ValueError, match=field):
        EngineConfig(**{field: value})


def test_engine_config_keeps_usable_timeouts():
    c = EngineConfig(start_timeout_s=0.5, load_timeout_s=None, query_timeout_s=3)
    assert (c.start_timeout_s, c.load_timeout_s, c.query_timeout_s) == (0.5, None, 3)
    with pytest.raises(ValueError, match="start_timeout_s"):
        EngineConfig(start_timeout_s=None)


@pytest.mark.parametrize("value", BAD)
def test_serve_config_refuses_unusable_timeouts(value):
    with pytest.raises(ValueError, match="timeout_s"):
        ServeConfig("t.pftrace", timeout_s=value)
    if value != 0:  # linger 0 is valid: stop as soon as the trace was sent
        with pytest.raises(ValueError, match="linger_s"):
            ServeConfig("t.pftrace", linger_s=value)
    assert ServeConfig("t.pftrace", timeout_s=0.3, linger_s=0).linger_s == 0


@requires_portable
@pytest.mark.parametrize("value", [0, -2, math.inf, math.nan])
def test_query_timeout_argument_is_checked_and_the_session_stays_usable(value):
    from perfetto_graph_ann.query.session import open_trace

    with open_trace(fixture_trace("two_branch"), engine="portable") as s:
        with pytest.raises(ValueError, match="timeout_s"):
            s.query("SELECT 1 AS x", timeout_s=value)
        assert s.query("SELECT 2 AS x").df()["x"].tolist() == [2]


# ---- integers stay integers when a column also holds NULL -------------------------------
# (before: pandas turned such columns into float64, so `sql --format csv` printed ids as
# `10935.0` and 2**53 + 1 came out as 9007199254740992)
BIG = 2 ** 53 + 1
MIXED_SQL = f"SELECT {BIG} AS big, 1 AS k UNION ALL SELECT NULL, 2 ORDER BY k"


@requires_portable
def test_query_df_keeps_integers_with_nulls_exact():
    from perfetto_graph_ann.query.session import open_trace

    with open_trace(fixture_trace("two_branch"), engine="portable") as s:
        df = s.query(MIXED_SQL).df()
        assert df["big"].tolist()[0] == BIG and type(df["big"].tolist()[0]) is int
        assert df["big"].isna().tolist() == [False, True]
        assert df["k"].tolist() == [1, 2]
    # every column of a real table equals the engine's own cells, NULLs included
    with open_trace(fixture_trace("seed_block_eager"), engine="portable") as s:
        sql = "SELECT id, ts, dur, parent_id, arg_set_id, name FROM slice ORDER BY id"
        result = s.query(sql)
        df = s.query(sql).df()
        for col in result.columns:
            got = [None if v is None or (not isinstance(v, str) and pd_isna(v)) else v for v in df[col].tolist()]
            assert got == [getattr(r, col) for r in result.rows], col
        assert df["parent_id"].isna().any() and not df["parent_id"].isna().all()


@requires_portable
def test_query_many_keeps_integers_with_nulls_exact():
    import perfetto_graph_ann as pga

    df = pga.query_many([fixture_trace("two_branch"), fixture_trace("seed_block_graph")], MIXED_SQL)
    assert df["big"].tolist()[0::2] == [BIG, BIG] and df["big"].isna().tolist() == [False, True] * 2


@requires_portable
def test_sql_cli_prints_integers_with_nulls_exactly(capsys):
    import csv
    import io
    import json

    from perfetto_graph_ann.cli.main import main

    trace = str(fixture_trace("two_branch"))
    assert main(["sql", trace, MIXED_SQL, "--format", "csv"]) == 0
    assert list(csv.reader(io.StringIO(capsys.readouterr().out))) == [["big", "k"], [str(BIG), "1"], ["", "2"]]
    assert main(["sql", trace, MIXED_SQL, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"big": BIG, "k": 1}, {"big": None, "k": 2}]
    assert main(["sql", trace, MIXED_SQL]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split() for ln in lines[2:4]] == [[str(BIG), "1"], ["NULL", "2"]]


def pd_isna(v) -> bool:
    import pandas as pd

    return bool(pd.isna(v))
