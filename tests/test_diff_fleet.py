"""``perfetto-graph-ann diff`` / ``pga.diff`` on two fleets of ranks (issue 35, item 1).

A fleet is the recorded seed block copied once per rank with ``distributedInfo.rank`` set,
each with its capture record beside it; the file names carry no rank, and the base fleet's
sort in reverse rank order, the new fleet's in another (the stretched rank second), so only
matching by ``distributedInfo.rank`` pairs them right and names the stretched rank.
The expected numbers come from the JSON itself (test_diff's helpers: the attention scope's
kernels, their per-replay union, nearest-rank medians).
"""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from conftest import fixture_capture, fixture_trace
from support.engine_support import requires_portable
from test_diff import _attention_busy, _attention_indices, _doc, _stretched, _write
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.errors import InputError

CAP = str(fixture_capture("seed_block_annotated"))
RANKS = 3
STRETCHED = 2

pytestmark = requires_portable


def _fleet(folder: Path, ranks=range(RANKS), stretched=None, attention=None, names=None) -> Path:
    """``folder`` with one trace per rank (``names[r]``, else ``host-<x>.trace.json.gz``, x in
    reverse rank order) and its capture record; rank ``stretched``'s attention kernels last
    STRETCH times longer."""
    folder.mkdir(parents=True)
    ranks = list(ranks)
    for r in ranks:
        doc = _stretched(_doc(), attention) if r == stretched else _doc()
        doc["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": len(ranks)}
        stem = names[r] if names else f"host-{chr(ord('a') + len(ranks) - 1 - r)}"
        _write(doc, folder / f"{stem}.trace.json.gz")
        shutil.copy(CAP, folder / f"{stem}.capture.json")
    return folder


@pytest.fixture(scope="module")
def attention():
    return _attention_indices()


@pytest.fixture(scope="module")
def fleets(tmp_path_factory, attention):
    root = tmp_path_factory.mktemp("fleets")
    return {"base": _fleet(root / "base"),
            "new": _fleet(root / "new", stretched=STRETCHED, attention=attention,
                          names={0: "host-a", 1: "host-c", 2: "host-b"})}


def test_a_fleet_against_itself_has_no_real_difference(fleets, attention, tmp_path):
    import perfetto_graph_ann as pga

    df = pga.diff(fleets["base"], str(fleets["base"] / "host-*.trace.json.gz"), engine="portable")
    assert df.attrs["ranks"] == list(range(RANKS))
    assert df.attrs["new"] == df.attrs["base"]
    # rank r is host-<...> in reverse order: paired by distributedInfo.rank, not by file order
    assert df.attrs["base"][0].endswith(f"host-{chr(ord('a') + RANKS - 1)}.trace.json.gz")
    assert not df["real"].any() and (df["delta_dur"] == 0).all() and (df["delta_spread_dur"] == 0).all()
    assert set(df["status"]) == {"matched"} and (df["ranks"] == RANKS).all()
    att = df[(df["kind"] == "scope") & (df["name"] == "attention")].iloc[0]
    assert att["base_median_dur"] == att["new_median_dur"] == _attention_busy(_doc(), attention)
    assert "on at least one rank" in df.attrs["rule"] and "BOTH runs of that rank" in df.attrs["rule"]

    # NEW as a list of .pftrace conversions (rank from the file name, rank<N>), in another order
    converted = []
    for r in reversed(range(RANKS)):
        src = fleets["base"] / f"host-{chr(ord('a') + RANKS - 1 - r)}.trace.json.gz"
        converted.append(str(tmp_path / f"rank{r}.pftrace"))
        assert main(["convert", str(src), "-a", CAP, "-o", converted[-1], "-q"]) == 0
    df = pga.diff(fleets["base"], converted, engine="portable")
    assert df.attrs["new"] == [str(tmp_path / f"rank{r}.pftrace") for r in range(RANKS)]
    assert not df["real"].any() and (df["delta_dur"] == 0).all() and len(df) > 10


def test_one_slower_rank_comes_first_and_is_named(fleets, attention, tmp_path):
    import perfetto_graph_ann as pga

    doc = _doc()
    busy, slow = _attention_busy(doc, attention), _attention_busy(_stretched(doc, attention), attention)
    assert slow > busy
    df = pga.diff(fleets["base"], fleets["new"], engine="portable")
    first = df[df["kind"] != "replay"].iloc[0]
    assert (first["rank"], first["kind"], first["name"]) == (1, "scope", "attention")
    assert first["real"] and first["delta_dur"] == slow - busy and first["most_changed_rank"] == STRETCHED
    assert first["real_ranks"] == 1 and first["median_delta_dur"] == 0
    assert (first["min_delta_dur"], first["max_delta_dur"], first["delta_spread_dur"]) == (0, slow - busy, slow - busy)
    assert first["base_median_dur"] == first["new_median_dur"] == busy  # the median rank did not change
    assert (first["new_slowest_rank"], first["new_slowest_dur"]) == (STRETCHED, slow)
    assert first["base_slowest_dur"] == busy
    # the other scopes did not change on any rank
    others = df[(df["kind"] == "scope") & (df["name"] != "attention")]
    assert len(others) == 3 and not others["real"].any() and (others["delta_spread_dur"] == 0).all()
    real = df[(df["kind"] != "replay") & df["real"]]
    assert (real["most_changed_rank"] == STRETCHED).all()
    assert list(real["delta_dur"].abs()) == sorted(real["delta_dur"].abs(), reverse=True)
    replay = df[df["kind"] == "replay"].iloc[0]
    assert replay["most_changed_rank"] == STRETCHED and replay["delta_dur"] > 0 and replay["median_delta_dur"] == 0

    # by rank: every rank's row; the stretched rank's attention first, the same delta
    by = pga.diff(fleets["base"], fleets["new"], engine="portable", by_rank=True)
    top = by[by["kind"] != "replay"].iloc[0]
    assert (top["dist_rank"], top["kind"], top["name"], top["delta_dur"]) == (STRETCHED, "scope", "attention",
                                                                              slow - busy)
    att = by[(by["kind"] == "scope") & (by["name"] == "attention")]
    assert sorted(att["dist_rank"]) == list(range(RANKS)) and att["real"].sum() == 1

    # the CLI: json rows as the DataFrame; the table names the rank
    out = tmp_path / "fleet.json"
    assert main(["diff", str(fleets["base"]), str(fleets["new"]), "--engine", "portable", "--format", "json",
                 "-o", str(out), "-q"]) == 0
    result = json.loads(out.read_text())
    assert result["ranks"] == list(range(RANKS)) and "on at least one rank" in result["rule"]
    row = [r for r in result["rows"] if r["kind"] != "replay"][0]
    assert (row["name"], row["delta_dur"], row["most_changed_rank"]) == ("attention", slow - busy, STRETCHED)
    files = sorted(str(p) for p in fleets["new"].glob("*.trace.json.gz"))
    assert main(["diff", "--base", *sorted(str(p) for p in fleets["base"].glob("*.trace.json.gz")), "--new", *files,
                 "--engine", "portable", "--by-rank", "--format", "csv", "-o", str(tmp_path / "by.csv"), "-q"]) == 0
    with open(tmp_path / "by.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["dist_rank"] for r in table if r["kind"] == "replay"] == ["2", "0", "1"]  # the changed rank's first
    first_item = [r for r in table if r["kind"] != "replay"][0]
    assert (first_item["dist_rank"], first_item["name"], int(first_item["delta_dur"])) == ("2", "attention",
                                                                                           slow - busy)
    text_out = tmp_path / "fleet.txt"
    assert main(["diff", str(fleets["base"]), str(fleets["new"]), "--engine", "portable", "-o", str(text_out),
                 "-q"]) == 0
    text = text_out.read_text()
    assert text.startswith(f"ranks: {RANKS} (0, 1, 2)") and "on at least one rank" in text and "attention" in text


def test_fleets_with_different_ranks_are_refused(fleets, tmp_path, capsys, attention):
    import perfetto_graph_ann as pga

    two = _fleet(tmp_path / "two", ranks=[0, 2])
    out = tmp_path / "diff.csv"
    assert main(["diff", str(fleets["base"]), str(two), "--engine", "portable", "--format", "csv",
                 "-o", str(out)]) == 2
    err = capsys.readouterr()
    assert err.out == "" and "different ranks" in err.err and "Traceback" not in err.err
    assert "ranks only in the base fleet: 1 (" in err.err and str(fleets["base"]) in err.err
    assert not out.exists() and not list(tmp_path.glob("diff*"))
    # unless asked: the common ranks only
    df = pga.diff(fleets["base"], two, engine="portable", common_ranks=True)
    assert df.attrs["ranks"] == [0, 2] and not df["real"].any() and (df["ranks"] == 2).all()
    # a rank twice in one fleet
    dup = _fleet(tmp_path / "dup", ranks=[0, 1], names={0: "x", 1: "y"})
    shutil.copy(dup / "x.trace.json.gz", dup / "z.trace.json.gz")
    shutil.copy(CAP, dup / "z.capture.json")
    with pytest.raises(InputError, match="is rank 0 of the new fleet, like") as e:
        pga.diff(fleets["base"], dup, engine="portable", common_ranks=True)
    assert e.value.path.endswith("z.trace.json.gz")
    # a trace that names no rank, in a file name without one
    bare = tmp_path / "bare"
    bare.mkdir()
    _write(_doc(), bare / "host.trace.json.gz")
    with pytest.raises(InputError, match="names no rank"):
        pga.diff(bare, fleets["base"], engine="portable")


def test_one_rank_form_is_unchanged(tmp_path, capsys):
    import perfetto_graph_ann as pga

    seed = str(fixture_trace("seed_block_annotated"))
    df = pga.diff(seed, seed, base_annotations=CAP, new_annotations=CAP, engine="portable")
    assert "base_dur" in df.columns and "most_changed_rank" not in df.columns and "ranks" not in df.attrs
    assert df.attrs["rule"].startswith("real difference: |median(new)")
    assert main(["diff", seed, seed, "-a", CAP, "--engine", "portable", "--top", "3"]) == 0
    assert capsys.readouterr().out.startswith(f"base: {seed}\nnew:  {seed}\n")
    assert main(["diff", seed, seed, "--by-rank", "--engine", "portable"]) == 2
    assert "--by-rank is for fleets" in capsys.readouterr().err
    assert main(["diff", "--base", seed, "--engine", "portable"]) == 2
    assert "--new" in capsys.readouterr().err


def _one_rank_row(kind, name, base, new, real, status="matched", spread=0):
    return {"rank": None, "kind": kind, "graph_name": "g", "name": name, "status": status, "real": real,
            "delta_dur": None if base is None and new is None else (new or 0) - (base or 0),
            "delta_fraction": None, "metric": "busy_dur", "base_dur": base, "new_dur": new,
            "base_spread_dur": spread, "new_spread_dur": spread, "base_replays": 5, "new_replays": 5, "depth": 0}


def test_fleet_statistics_from_one_rank_rows():
    """compare_fleet alone, on hand-made one-rank rows: medians across ranks (nearest rank),
    slowest ranks, the rank that changed most among the real ones, a status that differs by rank."""
    import pandas as pd

    from perfetto_graph_ann.query.diff_fleet import compare_fleet

    per_rank = {
        0: [_one_rank_row("replay", "g", 100, 100, False), _one_rank_row("scope", "a", 10, 11, False, spread=5),
            _one_rank_row("kernel", "k", None, 7, True, status="new")],
        1: [_one_rank_row("replay", "g", 100, 120, True), _one_rank_row("scope", "a", 30, 20, True),
            _one_rank_row("kernel", "k", 4, 4, False)],
        3: [_one_rank_row("replay", "g", 90, 90, False), _one_rank_row("scope", "a", 20, 50, False, spread=40),
            _one_rank_row("kernel", "k", 5, 5, False)],
    }
    fleet, by_rank = compare_fleet({r: pd.DataFrame(rows) for r, rows in per_rank.items()})
    rows = {(r["kind"], r["name"]): r for r in fleet.to_dict("records")}
    a = rows[("scope", "a")]
    # real on rank 1 only (-10); rank 3's +30 is within its spread: the effect is rank 1's
    assert (a["real"], a["delta_dur"], a["most_changed_rank"], a["real_ranks"]) == (True, -10, 1, 1)
    assert (a["median_delta_dur"], a["min_delta_dur"], a["max_delta_dur"], a["delta_spread_dur"]) == (1, -10, 30, 40)
    assert (a["base_median_dur"], a["new_median_dur"]) == (20, 20)  # nearest rank of 3 values: the 2nd
    assert (a["base_slowest_rank"], a["base_slowest_dur"]) == (1, 30)
    assert (a["new_slowest_rank"], a["new_slowest_dur"]) == (3, 50)
    assert a["delta_fraction"] == -10 / 30
    k = rows[("kernel", "k")]
    assert k["status"] == "matched on ranks 1,3; new on rank 0" and k["real"] and k["most_changed_rank"] == 0
    assert (k["delta_dur"], k["base_median_dur"], k["new_median_dur"]) == (7, 4, 5)
    g = rows[("replay", "g")]
    assert pd.isna(g["rank"]) and (g["delta_dur"], g["most_changed_rank"], g["base_slowest_rank"]) == (20, 1, 0)
    # ranked: the replay first, then the real ones by |delta| (a: 10, k: 7)
    assert list(fleet["name"]) == ["g", "a", "k"] and list(fleet["rank"].iloc[1:]) == [1, 2]
    # by rank: every row, real first by |delta|, the replays first
    assert list(zip(by_rank["kind"], by_rank["dist_rank"]))[:3] == [("replay", 1), ("replay", 0), ("replay", 3)]
    items = by_rank[by_rank["kind"] != "replay"]
    assert list(zip(items["name"], items["dist_rank"])) == [("a", 1), ("k", 0), ("a", 3), ("a", 0), ("k", 1), ("k", 3)]
    assert list(items["rank"]) == [1, 2, 3, 4, 5, 6]
