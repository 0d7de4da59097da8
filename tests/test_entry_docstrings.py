"""The entry points document their arguments, result and errors (``Args:`` / ``Returns:`` /
``Raises:``), each argument of the signature named in ``Args:``."""
from __future__ import annotations

import inspect
import re

import pytest

import perfetto_graph_ann as pga
from perfetto_graph_ann.join import join
from perfetto_graph_ann.pipeline.query import open_json

ENTRY_POINTS = {"convert": pga.convert, "merge": pga.merge, "export": pga.export, "join": join,
                "read_and_join": pga.read_and_join, "open_trace": pga.open_trace, "open_json": open_json,
                "query_many": pga.query_many, "fleet_report": pga.fleet_report}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_entry_point_docstring_has_args_returns_raises(name):
    fn = ENTRY_POINTS[name]
    doc = inspect.getdoc(getattr(fn, "__wrapped__", fn))
    for section in ("Args:", "Returns:", "Raises:"):
        assert re.search(rf"^{section}$", doc, re.M), f"{name}: no {section}"
    args = doc.split("Args:", 1)[1].split("Returns:", 1)[0]
    documented = set(re.findall(r"^    (\w+(?:, \w+)*):", args, re.M))
    named = {n for d in documented for n in d.split(", ")}
    params = [p for p in inspect.signature(fn).parameters if p not in ("self", "converter")]
    missing = [p for p in params if p not in named]
    assert not missing, f"{name}: Args: does not name {missing}"
