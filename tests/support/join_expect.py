"""Independent expectations for the join tests, computed straight from the fixture JSON
and capture records with the json module (no code under test), plus two annotation sets
the tests build by hand."""
from __future__ import annotations

import dataclasses
import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

from perfetto_graph_ann._resources import demo_data_dir
from perfetto_graph_ann.annotations.model import AnnotationSet, GraphRecord, NodeRecord

# Fixture paths are defined here, not imported from conftest: tests/gpu has its own
# conftest module, and whichever is imported first wins the name "conftest".
FIXTURES = demo_data_dir()
TRACES = sorted(p.name[: -len(".trace.json.gz")] for p in FIXTURES.glob("*.trace.json.gz"))


def fixture_trace(name: str) -> Path:
    return FIXTURES / f"{name}.trace.json.gz"


def fixture_capture(name: str) -> Path:
    return FIXTURES / f"{name}.capture.json"


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


def strip_calibration(a: AnnotationSet) -> AnnotationSet:
    """The same annotations without calibration (forces the structural join)."""
    graphs = tuple(dataclasses.replace(g, nodes=tuple(dataclasses.replace(n, stream=None, ordinal=None)
                                                       for n in g.nodes)) for g in a.graphs)
    return dataclasses.replace(a, graphs=graphs)


def allreduce_annotations() -> AnnotationSet:
    """What capture records for the graphed all_reduce: the NCCL node with the eager fields."""
    eager = load_json("allreduce_eager_rank0")
    nccl = next(e for _, e in kernels(eager) if e["name"].startswith("ncclDevKernel"))
    gemm = next(e for _, e in kernels(eager) if "gemm" in e["name"])
    fields = {k: nccl["args"][k] for k in COLLECTIVE_FIELDS}
    mangled = "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"
    nodes = (
        NodeRecord(key=(1 << 32) | 0, kernel=gemm["name"], grid=tuple(gemm["args"]["grid"]), block=tuple(gemm["args"]["block"])),
        NodeRecord(key=(1 << 32) | 1, kernel=mangled, grid=tuple(nccl["args"]["grid"]), block=tuple(nccl["args"]["block"]),
                   annotation=dict(fields, stream=60)),
    )
    return AnnotationSet(graphs=(GraphRecord(exec_id=1, nodes=nodes),), lanes={60: "default_pg (all_reduce)"})


def launch_pids(name: str) -> List[int]:
    """The pids of the ``cudaGraphLaunch`` events of a fixture trace (the capturing process)."""
    return sorted({e["pid"] for e in load_json(name)["traceEvents"]
                   if e.get("ph") == "X" and e.get("name") == "cudaGraphLaunch"})


def as_fixture_process(monkeypatch, name: str = "seed_block_annotated") -> None:
    """Make this process's capture identity that of the process that recorded fixture ``name``,
    for tests that capture here (fakes) and join with a recorded fixture trace."""
    from perfetto_graph_ann.capture import identity
    from perfetto_graph_ann.annotations.model import CaptureIdentity

    (pid,) = launch_pids(name)
    monkeypatch.setattr(identity, "capture_identity", lambda: CaptureIdentity(host="fixture", pid=pid))
