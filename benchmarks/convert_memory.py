"""Benchmark (issue 33): where a conversion's memory goes, in one fresh process per mode.

    python benchmarks/convert_memory.py TRACE.json [--mode read|whole|phases] [--block BYTES]

``read``: ``read_trace`` (the streaming read, ``--block`` bytes a block); ``whole``: the
whole-file read it replaces (``parse_trace_bytes`` of the file's bytes); ``phases``: a whole
conversion with the RSS after the read and after each writer phase (``plan_events``,
``bind_flows``, ``order_records``) and at the end. Prints wall and CPU seconds and the peak
RSS (VmHWM); the cyclic GC is paused as ``convert`` pauses it. Run each mode in its own
process (the peak is per process).
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _mem() -> str:
    d = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                d[line.split(":")[0]] = int(line.split()[1]) // 1024
    return f"RSS {d.get('VmRSS', 0)} MB, peak {d.get('VmHWM', 0)} MB"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--mode", choices=("read", "whole", "phases"), default="phases")
    ap.add_argument("--block", type=int, default=0, help="streaming read block (default: read.kineto.STREAM_BLOCK)")
    args = ap.parse_args()
    gc.disable()
    from perfetto_graph_ann import formats
    from perfetto_graph_ann.read import kineto

    if args.block:
        kineto.STREAM_BLOCK = args.block
    t, c = time.perf_counter(), time.process_time()
    if args.mode == "whole":
        trace = kineto.parse_trace_bytes(formats.read_bytes(args.trace), args.trace)
    else:
        trace = kineto.read_trace(args.trace)
    print(f"{args.mode}: {len(trace.events):,} events, {time.perf_counter() - t:.2f} s wall, "
          f"{time.process_time() - c:.2f} s CPU; {_mem()}", flush=True)
    if args.mode != "phases":
        return
    from perfetto_graph_ann.write.perfetto import writer
    from perfetto_graph_ann.write.pftrace import ConvertConfig, write_pftrace

    for name in ("plan_events", "bind_flows", "order_records"):
        fn = getattr(writer, name)

        def wrapped(*a, _fn=fn, _name=name, **k):
            out = _fn(*a, **k)
            print(f"after {_name}: {_mem()}", flush=True)
            return out
        setattr(writer, name, wrapped)
    with tempfile.TemporaryDirectory() as tmp:
        write_pftrace(trace, os.path.join(tmp, "out.pftrace"), None, ConvertConfig(progress=False))
    print(f"written: {_mem()}")


if __name__ == "__main__":
    main()
