"""Benchmark: the reader's typed path with and without its ``__class__`` switch.

    python benchmarks/read_swap.py [--graph-events 200000] [--repeat 9]

The typed path (``read/events.py``) decodes ``traceEvents`` into ``_KinetoEvent`` objects (a
``TraceEvent`` subclass with the same slots) and turns each into a plain ``TraceEvent`` by
assigning ``__class__``. The alternative without it builds a new ``TraceEvent`` per event from
the decoded one. Both arms run on the same array text of the kernel-heavy graph trace
(``benchmarks/convert.py --graph-events``), alternating, GC paused as ``convert`` runs them;
each time includes freeing what the arm leaves behind. Best CPU time of ``--repeat`` rounds.
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.synth import dumps, make_trace  # noqa: E402
from perfetto_graph_ann.read import events as ev  # noqa: E402
from perfetto_graph_ann.read.kineto import _split_top  # noqa: E402
from perfetto_graph_ann.read.model import TraceEvent  # noqa: E402


def switch(raw: bytes) -> list:
    """The reader's typed path as it is (bulk times, ``__class__`` switch)."""
    return ev._from_typed(raw, None)


def rebuild(raw: bytes) -> list:
    """The same events built anew: one ``TraceEvent`` per decoded object."""
    decoded = ev._typed_decoder.decode(raw)
    ts_all = ev._bulk_ns([e.ts_ns for e in decoded])
    dur_all = ev._bulk_ns([e.dur_ns for e in decoded])
    out = []
    append = out.append
    for i, e, ts_ns, dur_ns in zip(range(len(decoded)), decoded, ts_all, dur_all):
        sv, bp = e.index, e.extra
        if sv is None:
            extra = None if bp is None else {"bp": bp}
        else:
            extra = {"bp": bp, "s": sv} if bp is not None else {"s": sv}
        append(TraceEvent(i, e.ph, e.cat, e.name, e.pid, e.tid, ts_ns, dur_ns, e.args, e.id, extra))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph-events", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=9)
    opts = ap.parse_args()
    doc = dumps(make_trace(opts.graph_events, fixtures=("seed_block_annotated",)))
    raw = bytes(_split_top(doc)[1])
    assert switch(raw) == rebuild(raw) and all(type(e) is TraceEvent for e in switch(raw))
    arms = {"__class__ switch": switch, "new TraceEvent per event": rebuild}
    best = {k: float("inf") for k in arms}
    gc.disable()
    for _ in range(opts.repeat):
        for name, fn in arms.items():
            c = time.process_time()
            got = fn(raw)
            del got
            best[name] = min(best[name], time.process_time() - c)
    gc.enable()
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {opts.graph_events} graph events, "
          f"best of {opts.repeat}, CPU s (decode + free)")
    base = best["__class__ switch"]
    for name, t in best.items():
        print(f"| {name} | {t:.4f} | {t / base:.3f} |")


if __name__ == "__main__":
    main()
