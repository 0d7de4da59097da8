"""merge: several ranks in one .pftrace, checked in the trace processor against the fixture JSON."""
from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal

from support.engine_support import requires_portable
from support.join_expect import allreduce_annotations, calibrated_expectation, fixture_capture, fixture_trace, kernels, load_json
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.pipeline.merge import merge

pytestmark = requires_portable  # packet-level checks without an engine: test_merge_packets.py

SHIFT_NS = 1_500_000_000  # rank 1's profile started 1.5 s (absolute time) after rank 0's


def _rank1_copy(tmp_path):
    """allreduce_graph_rank0 relabelled as rank 1 with its base time 1.5 s later."""
    doc = load_json("allreduce_graph_rank0")
    doc["distributedInfo"] = dict(doc["distributedInfo"], rank=1)
    doc["baseTimeNanoseconds"] += SHIFT_NS
    p = tmp_path / "allreduce_graph_rank1.trace.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(doc, f)
    return p


def _ts_ns(e) -> int:
    return int(Decimal(str(e["ts"])) * 1000)


def test_merge_two_ranks_aligned_and_grouped(tmp_path):
    r1 = _rank1_copy(tmp_path)
    out = tmp_path / "all.pftrace"
    ann = allreduce_annotations()
    report = merge([fixture_trace("allreduce_graph_rank0"), r1], out, [ann, ann])
    assert report.shifts_ns == {0: 0, 1: SHIFT_NS}
    src = load_json("allreduce_graph_rank0")
    expect_ts = sorted(_ts_ns(e) for _, e in kernels(src))
    with open_trace(out, engine="portable") as s:
        rows = s.query("""
            SELECT s.ts, s.name, EXTRACT_ARG(s.arg_set_id, 'debug.rank') AS rank,
                   EXTRACT_ARG(s.arg_set_id, 'debug.stream') AS lane, t.name AS track,
                   p.name AS gpu, g.name AS grp
            FROM slice s JOIN track t ON s.track_id = t.id
            JOIN track p ON t.parent_id = p.id JOIN track g ON p.parent_id = g.id
            WHERE s.category = 'kernel'""").tuples()
        by_rank = {0: [], 1: []}
        for ts, name, rank, lane, track, gpu, grp in rows:
            by_rank[rank].append(ts)
            assert gpu == "GPU 0" and grp == f"Rank {rank}"
            if name.startswith("nccl"):
                assert lane == 60 and track == "60 default_pg (all_reduce)"
        assert sorted(by_rank[0]) == expect_ts
        assert sorted(by_rank[1]) == [t + SHIFT_NS for t in expect_ts]
        procs = {r[0] for r in s.query("SELECT name FROM process WHERE name IS NOT NULL").tuples()}
        assert any("[rank 0]" in p for p in procs) and any("[rank 1]" in p for p in procs)
        n_flows = s.query("SELECT COUNT(*) FROM flow").tuples()[0][0]
    with open_trace(_single(tmp_path), engine="portable") as s:
        single_flows = s.query("SELECT COUNT(*) FROM flow").tuples()[0][0]
    assert n_flows == 2 * single_flows > 0


def _single(tmp_path):
    """Rank 0 alone, joined to the same annotations (so with the same replay flows)."""
    from perfetto_graph_ann.join import join
    from perfetto_graph_ann.read.kineto import read_trace
    from perfetto_graph_ann.pipeline.convert import convert

    p = tmp_path / "single.pftrace"
    trace = read_trace(fixture_trace("allreduce_graph_rank0"))
    convert(trace, p, layout=join(trace, allreduce_annotations()))
    return p


def test_merge_cli_per_rank_annotations(tmp_path, capsys):
    out = tmp_path / "merged.pftrace"
    rc = main(["merge", str(fixture_trace("seed_block_annotated")), str(fixture_trace("two_branch")),
               "-a", str(fixture_capture("seed_block_annotated")), "-a", str(fixture_capture("two_branch")),
               "-o", str(out)])
    assert rc == 0 and out.exists()
    expect = {r: Counter(x["lane"] for x in calibrated_expectation(n).values())
              for r, n in enumerate(["seed_block_annotated", "two_branch"])}
    with open_trace(out, engine="portable") as s:
        rows = s.query("""SELECT EXTRACT_ARG(arg_set_id, 'debug.rank') AS rank,
                                 EXTRACT_ARG(arg_set_id, 'debug.stream') AS lane, COUNT(*)
                          FROM slice WHERE category = 'kernel' GROUP BY 1, 2""").tuples()
    got = {0: Counter(), 1: Counter()}
    for rank, lane, n in rows:
        got[rank][lane] = n
    assert got == expect


def test_merge_cli_errors(tmp_path, capsys):
    out = tmp_path / "m.pftrace"
    t = str(fixture_trace("two_branch"))
    a = str(fixture_capture("two_branch"))
    # same trace twice, no distributedInfo: ranks by position, so this is fine
    assert main(["merge", t, t, "-o", str(out)]) == 0
    # three annotation files for two traces
    assert main(["merge", t, t, "-a", a, "-a", a, "-a", a, "-o", str(out)]) == 2
    assert "3 times for 2 traces" in capsys.readouterr().err
    # the same rank twice
    r0 = str(fixture_trace("allreduce_graph_rank0"))
    out2 = tmp_path / "dup.pftrace"
    assert main(["merge", r0, r0, "-o", str(out2)]) == 2
    assert "rank 0 appears twice" in capsys.readouterr().err and not out2.exists()


def test_merge_real_two_rank_capture(tmp_path):
    """The 2-rank all_reduce our live demo recorded on 2 H200s, each rank with its own sidecar:
    both ranks' NCCL kernels carry the eager fields, and each rank's kernels keep their own times
    shifted by the difference of the two traces' absolute bases (computed here from the JSON)."""
    from perfetto_graph_ann._resources import demo_live_data_dir
    from perfetto_graph_ann.annotations.files import load_annotations

    live = demo_live_data_dir()
    traces = [live / f"allreduce_graph_rank{r}.trace.json.gz" for r in (0, 1)]
    anns = [load_annotations(live / f"allreduce_graph_rank{r}.annotations.json") for r in (0, 1)]
    docs = [json.loads(gzip.decompress(p.read_bytes())) for p in traces]
    bases = [d["baseTimeNanoseconds"] for d in docs]
    out = tmp_path / "ranks.pftrace"
    report = merge(traces, out, anns)
    # aligned on absolute time: the ranks' shifts differ exactly by their bases' difference
    assert report.shifts_ns[1] - report.shifts_ns[0] == bases[1] - bases[0]
    eager = next(e for _, e in kernels(load_json("allreduce_eager_rank0")) if e["name"].startswith("nccl"))
    fields = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
              "Process Group Name", "Process Group Description", "Process Group Ranks")
    with open_trace(out, engine="portable") as s:
        cols = ", ".join(f"EXTRACT_ARG(arg_set_id, 'debug.{f}')" for f in fields)
        rows = s.query(f"""SELECT EXTRACT_ARG(arg_set_id, 'debug.rank'), ts, {cols} FROM slice
                           WHERE category = 'kernel' AND name LIKE 'nccl%' ORDER BY 1, 2""").tuples()
    for r, d in enumerate(docs):
        mine = [row for row in rows if row[0] == r]
        expect = sorted(_ts_ns(e) for _, e in kernels(d) if e["name"].startswith("nccl"))
        assert len(mine) == len(expect) == 5
        shift = report.shifts_ns[r]
        assert [row[1] - shift for row in mine] == expect
        for row in mine:
            assert tuple(row[2:]) == tuple(eager["args"][f] for f in fields)


def test_metrics_on_a_merge_of_ranks_on_distinct_devices(tmp_path):
    """The live 2-GPU capture: one row per (rank, device, lane), counted from the JSON. (Ranks
    that share a device id used to be refused; they are kept apart by their group now:
    tests/test_merge_groups.py.)"""
    from perfetto_graph_ann._resources import demo_live_data_dir
    from perfetto_graph_ann.query.metrics import lane_summary

    live = demo_live_data_dir()
    ok = tmp_path / "distinct.pftrace"
    merge([live / f"allreduce_graph_rank{r}.trace.json.gz" for r in (0, 1)], ok)
    df = lane_summary(ok, engine="portable")
    expect = Counter()
    for r in (0, 1):
        d = json.loads(gzip.decompress((live / f"allreduce_graph_rank{r}.trace.json.gz").read_bytes()))
        expect.update((r, e["args"]["device"], e["args"]["stream"]) for _, e in kernels(d))
    got = df[["group_id", "device", "lane_id", "work_count"]].itertuples(index=False)
    assert {(int(g), int(a), int(b)): int(n) for g, a, b, n in got} == dict(expect)
