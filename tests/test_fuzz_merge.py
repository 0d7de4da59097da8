"""Fuzzing ``merge``: ranks with hostile ``distributedInfo`` / ``baseTimeNanoseconds`` and, at
times, one mutated trace among them. Allowed: a merged trace that perfetto.protos decodes, or a
GraphAnnError naming one of the inputs or the output, with no output and no temporary file."""
from __future__ import annotations

import collections
import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import hostile_inputs as H
from test_fuzz_convert import _report
from perfetto_graph_ann.errors import GraphAnnError
from perfetto_graph_ann.pipeline.merge import merge

RANK_TRACES = ["allreduce_eager_rank0", "allreduce_graph_rank0", "two_branch"]
rank_spec = st.tuples(st.sampled_from(RANK_TRACES),
                      st.sampled_from(["rank", "world_size", "backend", "pg_count", "nccl_version"]), H.HOSTILE_VALUES,
                      st.sampled_from(["none", "none", "baseTimeNanoseconds", "distributedInfo"]), H.HOSTILE_VALUES)


def check_merge_case(folder: Path, specs, extra) -> str:
    paths = []
    for i, (name, key, val, top, top_val) in enumerate(specs):
        doc = H.base_trace(name)
        info = doc.setdefault("distributedInfo", {})
        info["rank"] = i
        info[key] = val
        if top != "none":
            doc[top] = top_val
        p = folder / f"rank{i}.trace.json"
        p.write_bytes(H.encode(doc))
        paths.append(p)
    if extra is not None:
        p = folder / "extra.trace.json"
        p.write_bytes(extra.data())
        paths.append(p)
    out = folder / "merged.pftrace"
    out.write_bytes(H.PREVIOUS)
    try:
        with H.no_hang():
            merge(paths, out)
    except H.Hang:
        raise
    except Exception as e:  # noqa: BLE001
        assert isinstance(e, GraphAnnError), f"{type(e).__name__} escaped: {e!r}"
        named = [p for p in paths + [out] if str(e).startswith(os.fspath(p))]
        assert named, f"message names no input or output: {e}"
        H.assert_typed_error(e, named[0])
        assert out.read_bytes() == H.PREVIOUS
        assert H.leftovers(folder) == []
        return "error"
    H.decode_pftrace(out.read_bytes())
    assert H.leftovers(folder) == []
    return "ok"


def _run(n: int, label: str) -> collections.Counter:
    counts: collections.Counter = collections.Counter()

    @settings(max_examples=n, database=None)
    @given(st.lists(rank_spec, min_size=1, max_size=3), st.none() | H.hostile_trace())
    def case(specs, extra):
        counts[check_merge_case(folder, specs, extra)] += 1

    t0 = time.monotonic()
    with H.scratch() as folder:
        case()
    _report(label, counts, time.monotonic() - t0)
    return counts


def test_fuzz_merge_fast():
    counts = _run(H.FAST_CASES, "merge_fast")
    assert counts["ok"] > 0 and counts["error"] > 0


@pytest.mark.fuzz_long
@pytest.mark.timeout(3000)
def test_fuzz_merge_long():
    _run(int(os.environ.get("PGA_FUZZ_LONG_MERGE", "1000")), "merge_long")
