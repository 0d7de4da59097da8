"""Independent expectations for the join tests, computed straight from the fixture JSON
and capture records with the json module (no code under test)."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

from conftest import fixture_capture, fixture_trace

#: Eager NCCL kernel arg keys that are collective metadata (FINDINGS.md).
COLLECTIVE_FIELDS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
                     "In split size", "Out split size", "Process Group Name", "Process Group Description",
                     "Process Group Ranks")


def load_json(name: str) -> dict:
    with gzip.open(fixture_trace(name), "rt") as f:
        return json.load(f)


def load_capture(name: str) -> dict:
    return json.loads(Path(fixture_capture(name)).read_text())


def kernels(doc: dict) -> List[Tuple[int, dict]]:
    """(file index, event) of every kernel / memcpy / memset."""
    return [(i, e) for i, e in enumerate(doc["traceEvents"])
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]


def label_lanes(cap: dict) -> Dict[str, int]:
    """mark_stream labels -> lane ids from 60 in order of first appearance in nodes."""
    out: Dict[str, int] = {}
    for n in cap["nodes"]:
        if isinstance(n.get("lane"), str) and n["lane"] not in out:
            out[n["lane"]] = 60 + len(out)
    return out


def calibrated_expectation(name: str) -> Dict[int, dict]:
    """file index -> {"key", "scope", "lane", "replay"} via (correlation, stream, ordinal)."""
    doc, cap = load_json(name), load_capture(name)
    exec_id = cap["exec_cupti_graph_id"]
    labels = label_lanes(cap)
    by_key = {(exec_id << 32) | (n["cupti_node_id"] & 0xFFFFFFFF): n for n in cap["nodes"]}
    table = {(v["stream"], v["ordinal"]): int(k) for k, v in cap["calibration"].items()}
    launches = sorted((e["ts"], e["args"]["correlation"]) for e in doc["traceEvents"]
                      if e.get("name") == "cudaGraphLaunch")
    replay_of = {c: i for i, (_, c) in enumerate(launches)}
    per = defaultdict(list)
    for i, e in kernels(doc):
        per[(e["args"]["correlation"], e["args"]["stream"])].append((e["ts"], i, e))
    out = {}
    for (corr, stream), evs in per.items():
        for ordinal, (_, i, e) in enumerate(sorted(evs, key=lambda t: (t[0], t[1]))):
            key = table[(stream, ordinal)]
            node = by_key[key]
            assert node["grid"] == e["args"]["grid"], "calibration disagrees with the trace"
            lane = node["lane"]
            lane = labels[lane] if isinstance(lane, str) else (7 if lane is None else lane)
            out[i] = {"key": key, "scope": node["scope"], "lane": lane, "replay": replay_of[corr],
                      "stream": stream, "graph": exec_id}
    return out
