"""``perfetto-graph-ann diff`` / ``pga.diff`` (issue 35, item 1) on the recorded seed block.

The expected numbers are computed here from the JSON itself: which kernels belong to the
``attention`` scope comes from the join (the capture record's scope membership), their times
and the per-replay union from the file's own ``ts`` / ``dur``.
"""
from __future__ import annotations

import copy
import csv
import gzip
import json
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from conftest import fixture_capture, fixture_trace
from support.engine_support import requires_portable
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.errors import InputError

SEED, CAP = str(fixture_trace("seed_block_annotated")), str(fixture_capture("seed_block_annotated"))
STRETCH = 1.5
SOFTMAX = "softmax_warp_forward"

pytestmark = requires_portable


def _doc():
    with gzip.open(SEED, "rt") as f:
        return json.load(f)


def _write(doc, path: Path) -> str:
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return str(path)


def _attention_indices():
    """traceEvents positions of the kernels the join puts in the ``attention`` scope."""
    import perfetto_graph_ann as pga
    from perfetto_graph_ann.annotations.files import load_annotation_files

    layout = pga.read_and_join(pga.read_trace(SEED), load_annotation_files([CAP]), graph_lanes="none").layout
    return {i for i, p in layout.placements.items() if (p.annotation or {}).get("name") == "attention"}


def _ns(us) -> int:
    # as Perfetto's JSON importer and our reader turn Kineto's µs into ns: the decimal text x 1000
    return int((Decimal(repr(us)) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _median(values):
    vals = sorted(values)
    return vals[(len(vals) + 1) // 2 - 1]  # nearest rank, as the diff


def _union(intervals) -> int:
    total, end = 0, None
    for ts, e in sorted(intervals):
        if end is None or ts >= end:
            total += e - ts
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def _attention_busy(doc, indices):
    """Median over replays (correlations) of the union of the attention kernels' intervals."""
    per_replay = {}
    for i in indices:
        ev = doc["traceEvents"][i]
        per_replay.setdefault(ev["args"]["correlation"], []).append((_ns(ev["ts"]), _ns(ev["ts"]) + _ns(ev["dur"])))
    return _median([_union(iv) for iv in per_replay.values()])


def _stretched(doc, indices):
    """A copy of ``doc`` whose kernels at ``indices`` last STRETCH times longer, and whose GPU
    work of the same replay that started after one of them ended starts that much later (a
    slower kernel delays what waits for it; stretched in place, kernels would overlap)."""
    new = copy.deepcopy(doc)
    events = doc["traceEvents"]
    extra = {}  # correlation -> [(original end, extra µs)]
    for i in indices:
        ev = events[i]
        extra.setdefault(ev["args"]["correlation"], []).append((ev["ts"] + ev["dur"], ev["dur"] * (STRETCH - 1)))
        new["traceEvents"][i]["dur"] = round(ev["dur"] * STRETCH, 3)  # whole ns, as Kineto writes
    for i, ev in enumerate(events):
        if ev.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and ev.get("args", {}).get("correlation") in extra:
            shift = sum(x for end, x in extra[ev["args"]["correlation"]] if end <= ev["ts"])
            new["traceEvents"][i]["ts"] = round(ev["ts"] + shift, 3)
    return new


@pytest.fixture(scope="module")
def attention():
    idx = _attention_indices()
    doc = _doc()
    assert len(idx) == 40 and all(doc["traceEvents"][i]["cat"] == "kernel" for i in idx)  # 8 kernels x 5 replays
    return idx


def test_a_trace_against_itself_has_no_real_difference(tmp_path):
    import perfetto_graph_ann as pga

    # BASE as JSON joined with its capture record, NEW the same run converted to .pftrace
    pf = tmp_path / "seed.pftrace"
    assert main(["convert", SEED, "-a", CAP, "-o", str(pf), "-q"]) == 0
    df = pga.diff(SEED, pf, base_annotations=CAP, engine="portable")
    assert not df["real"].any()
    assert (df["delta_dur"] == 0).all()
    assert set(df["status"]) == {"matched"}
    assert set(df["kind"]) == {"replay", "scope", "kernel", "lane"}
    replay = df[df["kind"] == "replay"].iloc[0]
    assert replay["base_replays"] == replay["new_replays"] == 5 and replay["base_p50_kernel_count"] == 14
    assert set(df.loc[df["kind"] == "scope", "name"]) == {"qkv_proj", "attention", "out_proj", "mlp"}
    assert "BOTH runs" in df.attrs["rule"]


def test_stretched_attention_comes_first_with_its_delta(tmp_path, attention):
    import perfetto_graph_ann as pga

    doc = _doc()
    new = _stretched(doc, attention)
    path = _write(new, tmp_path / "stretched.trace.json.gz")
    expected = _attention_busy(new, attention) - _attention_busy(doc, attention)
    assert expected > 0

    df = pga.diff(SEED, path, base_annotations=CAP, new_annotations=CAP, engine="portable")
    ranked = df[df["kind"] != "replay"]
    first = ranked.iloc[0]
    assert (first["rank"], first["kind"], first["name"]) == (1, "scope", "attention")
    assert first["real"] and first["delta_dur"] == expected
    assert first["delta_dur"] > first["base_spread_dur"] and first["delta_dur"] > first["new_spread_dur"]
    # the other scopes did not change
    others = ranked[(ranked["kind"] == "scope") & (ranked["name"] != "attention")]
    assert len(others) == 3 and not others["real"].any() and (others["delta_dur"] == 0).all()
    # the replay got slower; every real difference is attention's (its lane, its kernels)
    assert df[df["kind"] == "replay"].iloc[0]["delta_dur"] > 0
    real = ranked[ranked["real"]]
    assert set(real["kind"]) <= {"scope", "lane", "kernel"}
    assert "62 attention" in set(real.loc[real["kind"] == "lane", "name"])
    assert "61 mlp" not in set(real.loc[real["kind"] == "lane", "name"])
    # ranks follow the size of the effect among the real differences
    assert list(real["delta_dur"].abs()) == sorted(real["delta_dur"].abs(), reverse=True)


def test_vanished_and_new_kernels_are_listed(tmp_path, capsys):
    doc = _doc()
    renamed = 0
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "kernel" and SOFTMAX in ev.get("name", ""):
            ev["name"] = "my_fused_softmax_kernel"
            renamed += 1
    assert renamed == 5
    path = _write(doc, tmp_path / "renamed.trace.json.gz")
    out = tmp_path / "diff.json"
    assert main(["diff", SEED, path, "--engine", "portable", "--format", "json", "-o", str(out), "-q"]) == 0
    result = json.loads(out.read_text())
    assert "BOTH runs" in result["rule"]
    rows = {(r["kind"], r["name"]): r for r in result["rows"]}
    vanished = [r for r in result["rows"] if r["status"] == "vanished"]
    new = [r for r in result["rows"] if r["status"] == "new"]
    assert [r["kind"] for r in vanished] == ["kernel"] and SOFTMAX in vanished[0]["name"]
    assert [(r["kind"], r["name"]) for r in new] == [("kernel", "my_fused_softmax_kernel")]
    assert vanished[0]["real"] and new[0]["real"]
    assert new[0]["delta_dur"] == new[0]["new_dur"] > 0 and vanished[0]["delta_dur"] == -vanished[0]["base_dur"]
    assert rows[("kernel", "my_fused_softmax_kernel")]["base_replays"] == 0
    # csv: one table in the file -o names, every column, raw values
    out_csv = tmp_path / "diff.csv"
    assert main(["diff", SEED, path, "--engine", "portable", "--format", "csv", "-o", str(out_csv), "-q"]) == 0
    with open(out_csv, newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(result["rows"]) and table[0]["kind"] == "replay"
    assert {r["name"] for r in table if r["status"] == "new"} == {"my_fused_softmax_kernel"}
    # the table says the rule above it and lists both
    assert main(["diff", SEED, path, "--engine", "portable", "--top", "50"]) == 0
    text = capsys.readouterr().out
    assert "real difference:" in text.splitlines()[3]
    assert "my_fused_softmax_kernel" in text and "vanished" in text and "new" in text


def test_bad_input_is_one_error_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "broken.trace.json"
    bad.write_text('{"traceEvents": [')
    out = tmp_path / "diff.csv"
    assert main(["diff", SEED, str(bad), "--engine", "portable", "--format", "csv", "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and str(bad) in captured.err and "Traceback" not in captured.err
    assert not out.exists() and not list(tmp_path.glob("diff*"))
    merged = tmp_path / "merged.pftrace"
    assert main(["merge", SEED, SEED, "--label", "a", "--label", "b", "-o", str(merged), "-q"]) == 0
    assert main(["diff", str(merged), SEED, "--engine", "portable"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"{merged}: is a merged trace" in captured.err
    missing = tmp_path / "missing.pftrace"
    with pytest.raises(InputError, match=str(missing)):
        import perfetto_graph_ann as pga

        pga.diff(missing, SEED)


def test_a_run_without_replays_is_refused(tmp_path):
    import perfetto_graph_ann as pga

    eager = str(fixture_trace("seed_block_eager"))
    with pytest.raises(InputError, match="no CUDA graph replays") as e:
        pga.diff(SEED, eager, base_annotations=CAP, engine="portable")
    assert e.value.path == eager


def test_a_removed_kernel_keeps_the_graph_matched_by_name(tmp_path):
    import perfetto_graph_ann as pga

    graph = str(fixture_trace("seed_block_graph"))  # no annotations: graphs keyed by the launch
    with gzip.open(graph, "rt") as f:
        doc = json.load(f)
    n = len(doc["traceEvents"])
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not (e.get("cat") == "kernel" and "Gelu" in e["name"])]
    assert n - len(doc["traceEvents"]) == 5
    df = pga.diff(graph, _write(doc, tmp_path / "no_gelu.trace.json.gz"), engine="portable")
    replay = df[df["kind"] == "replay"].iloc[0]
    assert replay["status"] == "kernel count changed (14 -> 13)"
    assert (replay["base_p50_kernel_count"], replay["new_p50_kernel_count"]) == (14, 13)
    gone = df[df["status"] == "vanished"]
    assert list(gone["kind"]) == ["kernel"] and "Gelu" in gone.iloc[0]["name"] and gone.iloc[0]["real"]
    assert not (df["status"] == "new").any()


def test_collectives_are_matched_by_type():
    import perfetto_graph_ann as pga

    graph = str(fixture_trace("allreduce_graph_rank0"))  # the graphed NCCL kernel lost its metadata
    df = pga.diff(graph, graph, engine="portable")
    coll = df[df["kind"] == "collective"]
    assert list(coll["name"]) == ["allreduce"] and coll.iloc[0]["status"] == "matched"
    assert coll.iloc[0]["base_replays"] == 5 and not df["real"].any()
