"""The Python API as a daily user calls it: timeouts that cannot work are refused up front
with ValueError (before, inf crashed deep in a socket or lock with OverflowError, nan and 0
stopped the engine or server at once)."""
from __future__ import annotations

import math

import pytest

from conftest import fixture_trace
from engine_support import requires_portable
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
