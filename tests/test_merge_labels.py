"""merge --label: an eager and a graphed rank-0 trace side by side (issue 17, point 6).

Expectations come from the fixture JSON (kernel counts and timestamps per file); the merged
trace is checked in the trace processor."""
from __future__ import annotations

from decimal import Decimal

import pytest

from support.engine_support import requires_portable
from support.join_expect import fixture_trace, kernels, load_json
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.errors import InputError
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.pipeline.merge import merge

EAGER, GRAPHED = "allreduce_eager_rank0", "allreduce_graph_rank0"


def _ts_ns(e) -> int:
    return int(Decimal(str(e["ts"])) * 1000)


def test_same_rank_twice_without_labels_is_refused_with_a_hint(tmp_path):
    with pytest.raises(InputError, match=r"rank 0 appears twice .*--label"):
        merge([fixture_trace(EAGER), fixture_trace(GRAPHED)], tmp_path / "x.pftrace")
    assert not (tmp_path / "x.pftrace").exists()


def test_cli_label_count_must_match_the_traces(tmp_path, capsys):
    rc = main(["merge", str(fixture_trace(EAGER)), str(fixture_trace(GRAPHED)), "--label", "eager",
               "-o", str(tmp_path / "x.pftrace")])
    assert rc == 2 and "--label given 1 times for 2 traces" in capsys.readouterr().err


@requires_portable
def test_labelled_eager_and_graphed_rank0_side_by_side(tmp_path, capsys):
    out = tmp_path / "cmp.pftrace"
    rc = main(["merge", str(fixture_trace(EAGER)), str(fixture_trace(GRAPHED)),
               "--label", "eager", "--label", "graphed", "-o", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "rank 0 [eager]:" in printed and "rank 0 [graphed]:" in printed
    expect = {label: sorted(_ts_ns(e) for _, e in kernels(load_json(name)))
              for label, name in (("eager", EAGER), ("graphed", GRAPHED))}
    with open_trace(out, engine="portable") as s:
        rows = s.query("""
            SELECT s.ts, EXTRACT_ARG(s.arg_set_id, 'debug.label') AS label,
                   EXTRACT_ARG(s.arg_set_id, 'debug.rank') AS rank, g.name AS grp
            FROM slice s JOIN track t ON s.track_id = t.id
            JOIN track p ON t.parent_id = p.id JOIN track g ON p.parent_id = g.id
            WHERE s.category = 'kernel'""").tuples()
        got = {"eager": [], "graphed": []}
        for ts, label, rank, grp in rows:
            assert rank == 0 and grp == f"{label} (rank 0)"
            got[label].append(ts)
        assert {k: sorted(v) for k, v in got.items()} == expect
        procs = {r[0] for r in s.query("SELECT name FROM process WHERE name IS NOT NULL").tuples()}
        assert any("[eager, rank 0]" in p for p in procs) and any("[graphed, rank 0]" in p for p in procs)
