"""CPU side of ``test_critical_path_gpu.py``: the SQL module on the trace the GPU run wrote.

The GPU machine has no trace processor; run with ``PGA_CP_OUT=DIR`` there, bring DIR back
and run here (portable engine):

    python3 tests/gpu/check_critical_path_sql.py DIR

Checks, per replay (its launch's correlation), that ``graph_ann_critical_path_item`` lists
exactly the kernels the GPU test derived from the profile (``expected.json``: the fork, the
sin kernels, the add, as (start, end) ns), that every item's share and wait follow from the
previous item's end, that ``edges_source`` is ``edges``; prints the per-replay summary and
exits 1 on any difference.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from perfetto_graph_ann.query.session import open_trace


def main(folder: str) -> int:
    d = Path(folder)
    expected = {int(c): [tuple(x) for x in v] for c, v in json.loads((d / "expected.json").read_text()).items()}
    with open_trace(d / "two_branch_cp.pftrace", engine="portable") as s:
        s.query("INCLUDE PERFETTO MODULE graph_ann.critical_path")
        rows = s.query("SELECT r.correlation AS corr, i.ts, i.end_ts, i.share_dur, i.wait_dur, i.edges_source "
                       "FROM graph_ann_critical_path_item AS i JOIN graph_ann_replay AS r USING (launch_id) "
                       "ORDER BY r.correlation, i.position").tuples()
        summary = s.query("SELECT replay, edges_source, dur, item_count, launch_wait_dur, bounding_scope, "
                          "bounding_share_dur, off_path_slack_dur FROM graph_ann_critical_path").df()
    got: dict = {}
    bad = []
    for corr, ts, end, share, wait, src in rows:
        if src != "edges":
            bad.append(f"replay {corr}: edges_source {src}")
        got.setdefault(corr, []).append((ts, end, share, wait))
    for corr, path in expected.items():
        items = got.get(corr, [])
        if [(a, b) for a, b, _, _ in items] != path:
            bad.append(f"replay {corr}: path {[(a, b) for a, b, _, _ in items]} != expected {path}")
        for (ts, end, share, wait), prev in zip(items[1:], items):
            if share != end - max(ts, prev[1]) or wait != max(0, ts - prev[1]):
                bad.append(f"replay {corr}: item at {ts}: share {share} / wait {wait} do not follow from {prev[1]}")
    print(summary.to_string())
    print("\n".join(bad) if bad else f"critical path SQL: {len(expected)} replays as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
