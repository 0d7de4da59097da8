"""What the node table's read costs per driver call, and whether local ids are consecutive (GPU).

Inside each annotated capture of the 36-layer decoder at batch 16 (tests/gpu/blocks.py), right
after ``finish_capture`` has read the table (``raw_table``: per node ``cuGraphNodeGetType``,
``cuptiGetGraphNodeId`` and, for kernels, ``cuGraphKernelNodeGetParams_v2``), the same graph is
read again in variants that leave one call out (the node-id call replaced by a second type
query, which writes into the id's first 4 bytes), each timed; and the node ids of the listing
are checked for consecutiveness. Medians over ``--captures``, in microseconds.

    python3 benchmarks/gpu/probe_table_parts.py --captures 15
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2] / "tests" / "gpu")]
from blocks import capture_set, decoder, decoder_weights, warmup  # noqa: E402

from perfetto_graph_ann.capture import fastpath  # noqa: E402
from perfetto_graph_ann.capture.session import CaptureSession  # noqa: E402

T: dict = {}
GAPS: list = []


def _time(key, fn, *a):
    t0 = time.perf_counter()
    out = fn(*a)
    T.setdefault(key, []).append((time.perf_counter() - t0) * 1e6)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--captures", type=int, default=15)
    args = ap.parse_args()
    fast = fastpath.module()
    if fast is None:
        sys.exit("needs the compiled capture path (python3 hatch_build.py)")
    orig_init = CaptureSession.__init__

    def init(self, backend, *a, **k):
        orig_init(self, backend, *a, **k)
        cls = type(backend)
        if getattr(cls, "_pga_probe", False):
            return
        orig = cls.raw_table

        def raw_table(be, graph):
            raw = orig(be, graph)
            nodes, typ, params = be._table_addrs
            nid = be._node_id_addr
            _time("full", fast.read_nodes, nodes, typ, params, nid, graph)
            _time("no_params", fast.read_nodes, nodes, typ, 0, nid, graph)
            _time("no_id", fast.read_nodes, nodes, typ, params, typ, graph)
            _time("type_only", fast.read_nodes, nodes, typ, 0, typ, graph)
            _time("count", be.node_count, graph)
            if raw:
                ids = [r[1] & 0xFFFFFFFF for r in fastpath.NODE_ROW.iter_unpack(raw)]
                GAPS.append(sum(1 for a, b in zip(ids, ids[1:]) if b != a + 1))
                T.setdefault("n", []).append(len(ids))
                T.setdefault("first_id", []).append(ids[0])
            return raw
        cls.raw_table = raw_table
        cls._pga_probe = True
    CaptureSession.__init__ = init
    w = decoder_weights()
    ann = decoder(w, 16, annotate=True)
    warmup(ann)
    capture_set([ann], calibrate=False)
    T.clear()
    GAPS.clear()
    for _ in range(args.captures):
        g, _, _ = capture_set([ann], annotated=True, calibrate=False)
        for x in g:
            x.reset()
    out = {k: round(statistics.median(v), 1) for k, v in T.items()}
    out["non_consecutive_id_steps"] = GAPS
    import ctypes
    cu = ctypes.CDLL("libcuda.so.1")
    out["driver_symbols"] = {name: hasattr(cu, name) for name in (
        "cuGraphNodeGetLocalId", "cuGraphNodeGetToolsId", "cuGraphGetId", "cuGraphExecGetId")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
