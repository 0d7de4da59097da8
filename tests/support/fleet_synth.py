"""Synthetic fleets for the fleet tests (not a test module): N rank traces made from the
shipped live 2-rank all_reduce recording, and what their fleet report must say, computed
here from the JSON (exact decimal ts) without the package.

Rank r is a copy of recorded rank ``r % 2`` with ``distributedInfo`` and its sidecar's
process group widened to N ranks. A delay is injected on one rank by moving its
``baseTimeNanoseconds`` (its whole timeline, exactly, in Unix time), so the report only
sees it if it aligns the ranks' clocks.
"""
from __future__ import annotations

import copy
import gzip
import json
import statistics
from decimal import Decimal
from pathlib import Path
from typing import Dict, List, Optional

from perfetto_graph_ann._resources import demo_live_data_dir

LIVE = demo_live_data_dir()


def recording(rank: int) -> dict:
    with gzip.open(LIVE / f"allreduce_graph_rank{rank}.trace.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)


def sidecar(rank: int) -> dict:
    return json.loads((LIVE / f"allreduce_graph_rank{rank}.annotations.json").read_text())


def nccl_starts_ns(rank: int) -> List[int]:
    """Starts (trace ns, exact) of the recorded rank's NCCL kernels, in time order."""
    with gzip.open(LIVE / f"allreduce_graph_rank{rank}.trace.json.gz", "rt", encoding="utf-8") as f:
        doc = json.load(f, parse_float=Decimal)
    return sorted(int(Decimal(e["ts"]) * 1000) for e in doc["traceEvents"]
                  if e.get("ph") == "X" and e.get("cat") == "kernel" and "nccl" in e["name"].lower())


def make_fleet(folder: Path, n: int, delayed: Optional[int] = None, delay_ns: int = 0) -> Dict[int, Path]:
    """Write ``rank<r>.trace.json.gz`` + ``rank<r>.annotations.json`` for r < n into
    ``folder``; rank ``delayed`` runs ``delay_ns`` late. Returns rank -> trace path."""
    folder.mkdir(parents=True, exist_ok=True)
    members = list(range(n))
    out = {}
    for r in members:
        doc = recording(r % 2)
        doc["distributedInfo"] = dict(doc["distributedInfo"], rank=r, world_size=n)
        doc["distributedInfo"]["pg_config"] = [dict(doc["distributedInfo"]["pg_config"][0], pg_size=n, ranks=members)]
        if r == delayed:
            doc["baseTimeNanoseconds"] += delay_ns
        path = folder / f"rank{r}.trace.json.gz"
        with gzip.open(path, "wt", encoding="utf-8") as f:
            json.dump(doc, f)
        side = copy.deepcopy(sidecar(r % 2))
        for graph in side["graphs"]:
            for node in graph["nodes"]:
                ann = node.get("annotation")
                if ann and "Process Group Ranks" in ann:
                    ann["Group size"] = n
                    ann["Process Group Ranks"] = json.dumps(members).replace(",", ", ")
        (folder / f"rank{r}.annotations.json").write_text(json.dumps(side))
        out[r] = path
    return out


def expected_report(n: int, delayed: Optional[int] = None, delay_ns: int = 0) -> dict:
    """Per instance and per rank, what the report must say (see query/straggler.py for the
    definitions), from the recordings' JSON."""
    base = {r: recording(r).get("baseTimeNanoseconds", 0) for r in (0, 1)}
    starts = {r: [base[r % 2] + s + (delay_ns if r == delayed else 0) for s in nccl_starts_ns(r % 2)] for r in range(n)}
    count = len(starts[0])
    instances = []
    caused = {r: 0 for r in range(n)}
    lateness: Dict[int, List[float]] = {r: [] for r in range(n)}
    for k in range(count):
        s = {r: starts[r][k] for r in range(n)}
        latest = max(s.values())
        last = [r for r, v in s.items() if v == latest]
        ordered = sorted(s.values())
        med = statistics.median(v - ordered[0] for v in s.values())
        peer_wait = sum(latest - v for v in s.values())
        for r in last:
            caused[r] += peer_wait / len(last)
        for r, v in s.items():
            lateness[r].append((v - ordered[0]) - med)
        instances.append({"spread_ns": latest - ordered[0], "last": last, "lead_ns": latest - ordered[-2],
                          "peer_wait_ns": peer_wait})
    return {"instances": instances, "caused": caused,
            "median_lateness": {r: statistics.median(v) for r, v in lateness.items()}}
