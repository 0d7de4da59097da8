"""Cross-rank straggler metrics (query/straggler.py) on hand-made per-rank tables, trace
discovery, and the ``fleet`` command on the shipped 2-rank live recording."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from support.engine_support import requires_portable
from support.fleet_synth import LIVE, nccl_starts_ns, recording
from perfetto_graph_ann.errors import InputError
from perfetto_graph_ann.query.fleet import find_sidecar, find_traces
from perfetto_graph_ann.query.straggler import RankTables, combine, parse_ranks

US = 1000


def _coll(starts, pg="0", ctype="allreduce", size=4096, ranks="[0, 1, 2]", meta=True):
    n = len(starts)
    return pd.DataFrame({
        "id": list(range(n)), "ts": starts, "dur": [10 * US] * n, "device": [0] * n, "lane_id": [60] * n,
        "name": ["ncclDevKernel_AllReduce"] * n, "is_graphed": [1] * n, "has_metadata": [int(meta)] * n,
        "collective": [ctype if meta else None] * n, "collective_type": [ctype] * n,
        "msg_bytes": [size if meta else None] * n, "group_size": [3] * n,
        "pg_name": [pg if meta else None] * n, "pg_desc": ["default_pg" if meta else None] * n,
        "pg_ranks": [ranks if meta else None] * n,
    })


def _lanes():
    return pd.DataFrame({"device": [0], "lane_id": [60], "lane_name": ["60 x"], "work_count": [1],
                         "busy_dur": [5], "utilization": [0.5]})


def _rank(rank, coll, offset=0):
    return RankTables(rank, f"rank{rank}.pftrace", offset, coll, _lanes(), "h")


def test_last_arrival_spread_and_waits_with_clock_offsets():
    # Unix starts: instance 0 at 100/103/101 us, instance 1 at 200/200/209 us; rank 1's trace
    # clock is 50 us behind (offset +50 us)
    ranks = [_rank(0, _coll([100 * US, 200 * US])),
             _rank(1, _coll([53 * US, 150 * US]), offset=50 * US),
             _rank(2, _coll([101 * US, 209 * US]))]
    rep = combine(ranks)
    c = rep.collectives.set_index("seq")
    assert c.loc[0, "spread_ns"] == 3 * US and c.loc[0, "last_rank"] == 1 and c.loc[0, "last_lead_ns"] == 2 * US
    assert c.loc[0, "peer_wait_ns"] == (3 + 0 + 2) * US
    assert c.loc[1, "spread_ns"] == 9 * US and c.loc[1, "last_rank"] == 2 and c.loc[1, "last_lead_ns"] == 9 * US
    r = rep.ranking.set_index("rank")
    assert list(rep.ranking["rank"]) == [2, 1, 0]  # 18 us of peer wait, then 5, then 0
    assert r.loc[2, "peer_wait_caused_ns"] == 18 * US and r.loc[2, "delay_caused_ns"] == 9 * US
    assert r.loc[1, "times_last"] == 1 and r.loc[0, "times_last"] == 0
    # lateness: start - median start; rank 0 waited 3 + 9 us
    assert r.loc[2, "max_lateness_ns"] == 9 * US and r.loc[0, "waited_ns"] == 12 * US
    assert rep.worst_collectives(1)["seq"].tolist() == [1]


def test_a_tie_names_no_last_rank_and_splits_the_wait():
    rep = combine([_rank(0, _coll([100 * US])), _rank(1, _coll([104 * US])), _rank(2, _coll([104 * US]))])
    c = rep.collectives.iloc[0]
    assert pd.isna(c["last_rank"]) and c["last_tied"] == 2 and c["last_lead_ns"] == 0
    r = rep.ranking.set_index("rank")
    assert r.loc[1, "peer_wait_caused_ns"] == r.loc[2, "peer_wait_caused_ns"] == 2 * US
    assert r.loc[1, "times_last"] == 0 and r.loc[1, "times_tied_last"] == 1


def test_incomplete_or_inconsistent_instances_are_not_blamed():
    # rank 2 has only one kernel: instance 1 is missing on it; instance 0 disagrees on size
    ranks = [_rank(0, _coll([100 * US, 200 * US])), _rank(1, _coll([150 * US, 300 * US])),
             _rank(2, _coll([100 * US], size=8192))]
    rep = combine(ranks)
    c = rep.collectives.set_index("seq")
    assert not c.loc[0, "consistent"] and c.loc[0, "complete"]
    assert not c.loc[1, "complete"] and c.loc[1, "ranks"] == 2 and c.loc[1, "expected_ranks"] == 3
    assert not rep.collectives["blamed"].any() and rep.collectives["last_rank"].isna().all()
    assert (rep.ranking["peer_wait_caused_ns"] == 0).all() and (rep.ranking["instances"] == 0).all()


def test_groups_are_matched_by_process_group_and_order():
    # rank 0 runs pg "a" then pg "b"; rank 1 runs them in the other time order: each group's
    # k-th kernel still pairs with the other rank's k-th kernel of that group
    r0 = pd.concat([_coll([100 * US], pg="a", ranks="[0, 1]"), _coll([200 * US], pg="b", ranks="[0, 1]")],
                   ignore_index=True)
    r1 = pd.concat([_coll([250 * US], pg="a", ranks="[0, 1]"), _coll([120 * US], pg="b", ranks="[0, 1]")],
                   ignore_index=True)
    r0["id"], r1["id"] = [0, 1], [0, 1]
    rep = combine([_rank(0, r0), _rank(1, r1)])
    c = rep.collectives.set_index("pg")
    assert c.loc["a", "spread_ns"] == 150 * US and c.loc["a", "last_rank"] == 1
    assert c.loc["b", "spread_ns"] == 80 * US and c.loc["b", "last_rank"] == 0


def test_kernels_without_metadata_and_point_to_point():
    ranks = [_rank(0, _coll([100 * US], meta=False)), _rank(1, _coll([107 * US], meta=False)),
             _rank(2, _coll([100 * US], ctype="sendrecv"))]
    rep = combine(ranks)
    assert rep.collectives["pg"].tolist() == ["(no metadata: allreduce)"]  # sendrecv left out
    c = rep.collectives.iloc[0]
    assert c["blamed"] and c["last_rank"] == 1 and c["spread_ns"] == 7 * US and c["expected_ranks"] == 2


def test_parse_ranks():
    assert parse_ranks("[0, 1, 5]") == frozenset({0, 1, 5})
    assert parse_ranks("[]") is None and parse_ranks(None) is None and parse_ranks("0,1") is None


def test_find_traces_and_sidecars(tmp_path):
    assert [p.name for p in find_traces([LIVE])] == ["allreduce_graph_rank0.trace.json.gz",
                                                    "allreduce_graph_rank1.trace.json.gz"]
    assert find_sidecar(LIVE / "allreduce_graph_rank1.trace.json.gz").name == "allreduce_graph_rank1.annotations.json"
    assert find_sidecar(tmp_path / "x.pftrace") is None
    with pytest.raises(InputError, match="holds no trace files"):
        find_traces([tmp_path])
    with pytest.raises(InputError, match="no such file"):
        find_traces([tmp_path / "missing.json"])


@requires_portable
def test_fleet_cli_names_the_late_rank_of_the_live_recording(capsys):
    from perfetto_graph_ann.cli.main import main
    from perfetto_graph_ann.cli.tables import format_duration

    # from the JSON: the first all_reduce started on rank 1 after rank 0 by this much
    base0, base1 = recording(0)["baseTimeNanoseconds"], recording(1)["baseTimeNanoseconds"]
    s0, s1 = nccl_starts_ns(0), nccl_starts_ns(1)
    first_gap = (base1 + s1[0]) - (base0 + s0[0])
    spreads = [abs((base1 + b) - (base0 + a)) for a, b in zip(s0, s1)]
    assert main(["fleet", str(LIVE), "--format", "json", "--no-progress"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ranks"] == 2
    assert doc["ranking"][0]["rank"] == 1 and doc["ranking"][0]["times_last"] == 1
    assert doc["ranking"][0]["peer_wait_caused_ns"] == first_gap
    assert [c["spread_ns"] for c in doc["collectives"]] == spreads
    assert doc["worst_collectives"][0]["last_rank"] == 1 and doc["worst_collectives"][0]["spread_ns"] == first_gap
    assert {(lane["rank"], lane["lane_name"]) for lane in doc["lanes"]} >= {(0, "60 default_pg (all_reduce)"),
                                                                           (1, "60 default_pg (all_reduce)")}
    assert main(["fleet", str(LIVE), "--no-progress", "--top-collectives", "2"]) == 0
    out = capsys.readouterr().out
    assert "2 ranks, 5 collective instances, 5 of them complete" in out
    ranking = out.split("Straggler ranking")[1].splitlines()[3]  # title, header, rule, first row
    # the tables' one style (cli/tables.py): durations with their unit per cell
    assert ranking.split()[0] == "1" and format_duration(first_gap) in ranking
    assert "Largest arrival spreads (top 2)" in out


@requires_portable
def test_fleet_refuses_two_traces_of_one_rank(tmp_path, capsys):
    from perfetto_graph_ann.cli.main import main

    trace = LIVE / "allreduce_graph_rank0.trace.json.gz"
    copy = tmp_path / "copy.trace.json.gz"
    copy.write_bytes(trace.read_bytes())
    assert main(["fleet", str(trace), str(copy), "--no-sidecars", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert str(copy) in err and "is rank 0" in err


def test_fleet_wants_one_sidecar_per_trace(capsys):
    from perfetto_graph_ann.cli.main import main

    assert main(["fleet", str(LIVE), "-a", str(LIVE / "allreduce_graph_rank0.annotations.json")]) == 2
    assert "--annotations was given 1 times for 2 traces" in capsys.readouterr().err
