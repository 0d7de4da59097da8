"""Benchmark (issue 33, second target): what ``pga.export`` does after torch's JSON (read, join,
write), with the compiled loops on against off, in one process, on a real H200 trace.

    python benchmarks/export_loops_ab.py TRACE.json.gz ANNOTATIONS.json [--rounds 4] [--arms on bytes26 decoded]

The trace and its annotations are recorded on the GPU machine by
``benchmarks/gpu/record_export_trace.py`` (the 36-layer decoder of ``export_pace.py``, its
replay record and recorded edges, so the join runs the launch identities and the critical
path as ``pga.export`` does there). The JSON is written to a temporary file first (untimed:
torch writes it there). Arms, alternating each round:

* ``on``: as ``pga.export`` runs since session 27: ``convert.write_joined_file`` on the file
  torch wrote (kept for the profile's later calls, not read back): in memory below
  ``convert.TWO_PASS_MIN_BYTES`` (256 MB in session 27, 4 MB since session 28), else in two passes; every compiled loop, the join's
  placements held in columns, the cyclic collector paused;
* ``two-pass``: the same, two passes whatever the size, a graph replay's kernels framed from
  their text in the second (``emit.TEXT_EVENTS``);
* ``decoded``: two passes with ``emit.TEXT_EVENTS`` off (every event of the second pass decoded);
* ``bytes26``: as ``pga.export`` ran in session 26: the bytes read back (they were kept on
  the profile), parsed in memory (``parse_trace_bytes``) and written (``write_joined``), the
  collector paused;
* ``off29``: session 29's changes off: the plan's first walk in Python (``plan.KINDS_LOOP``),
  a batch read in one piece within 8 MiB (``scan._SPAN``, 1 MiB since session 29) and a
  replay's signatures by the Python memo (``match.LOOSE`` off: what a two-pass read used
  before the compiled loop took the memo), every replay's events sorted
  (``replays.IN_START_ORDER`` off), the critical path's rows set and the flows numbered in
  Python (``model.PATH_ROWS``, ``flows.NUMBER_FLOWS`` off);
* ``off26``: session 26's changes off: the collector on (as export ran before),
  ``critical_path.REPLAY_PATH``, ``flows.BIND_FLOW_EVENTS`` and ``calibrated.CALIBRATED_ROWS``
  off (the join's single pass for the launches cannot be turned off);
* ``off``: besides, the loops compiled in session 25 off (``plan.PLACE_LOOP``, ``plan.ASSIGN``,
  ``events.FINISH_RUN``, ``join.ROW_LOOPS``, ``projection.LOOPS``,
  ``critical_path.PATH_AND_SLACK``, ``match.LOOSE``) and the placements a dict.

Wall seconds of each arm (``bytes26``'s read back included); ``json.loads`` of the same bytes in
the same rounds (the collector on). Medians; every arm's output compared byte for byte. ``off26`` and
``off`` take the bytes path.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import importlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfetto_graph_ann.annotations.files import load_annotations  # noqa: E402
from perfetto_graph_ann.pipeline.convert import write_joined_file  # noqa: E402
from perfetto_graph_ann.join import calibrated, critical_path, match, projection  # noqa: E402
from perfetto_graph_ann.join import model as join_model, replays as replays_mod  # noqa: E402
from perfetto_graph_ann.pipeline import convert  # noqa: E402
from perfetto_graph_ann.read import events, scan  # noqa: E402
from perfetto_graph_ann.read.kineto import parse_trace_bytes  # noqa: E402
from perfetto_graph_ann.write.perfetto import emit, flows, plan  # noqa: E402
from perfetto_graph_ann.write.pftrace import paused_gc  # noqa: E402

join_mod = importlib.import_module("perfetto_graph_ann.join.join")  # the package exports the function by that name
_SWITCHES_25 = ((plan, "PLACE_LOOP"), (plan, "ASSIGN"), (events, "FINISH_RUN"), (join_mod, "ROW_LOOPS"),
                (projection, "LOOPS"), (critical_path, "PATH_AND_SLACK"), (match, "LOOSE"))
_SWITCHES_26 = ((critical_path, "REPLAY_PATH"), (flows, "BIND_FLOW_EVENTS"), (calibrated, "CALIBRATED_ROWS"))
_SWITCHES_29 = ((plan, "KINDS_LOOP"), (match, "LOOSE"), (replays_mod, "IN_START_ORDER"), (join_model, "PATH_ROWS"),
                (flows, "NUMBER_FLOWS"))
_SPAN_28 = 1 << 23  #: scan._SPAN before session 29
#: arm -> (the switches it turns off, the collector paused, the placements in columns, how it reads)
_ARMS = {"on": ((), True, True, "file"), "two-pass": ((), True, True, "file two-pass"),
         "decoded": ((), True, True, "file decoded"), "off29": (_SWITCHES_29, True, True, "file span28"),
         "bytes26": ((), True, True, "bytes"), "off26": (_SWITCHES_26, False, True, "bytes"),
         "off": (_SWITCHES_26 + _SWITCHES_25, False, False, "bytes")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("annotations")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--arms", nargs="+", default=["on", "two-pass", "bytes26", "decoded"], choices=list(_ARMS))
    args = ap.parse_args()
    opener = gzip.open if args.trace.endswith(".gz") else open
    with opener(args.trace, "rb") as f:
        data = f.read()
    ann = load_annotations(args.annotations)
    compiled = {k: getattr(*k) for k in _SWITCHES_25 + _SWITCHES_26 + _SWITCHES_29}
    if any(v is None for v in compiled.values()):
        sys.exit("the compiled loops are not built or are turned off")
    real = convert.read_and_join
    times: dict = {k: [] for k in ["json.loads", *args.arms]}
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}; "
          f"{len(data) / 1e6:.0f} MB of JSON")
    same = True
    text_events, min_bytes, span = emit.TEXT_EVENTS, convert.TWO_PASS_MIN_BYTES, scan._SPAN
    with tempfile.TemporaryDirectory(prefix="pga-export-ab-") as tmp:
        src = os.path.join(tmp, "trace.json")
        Path(src).write_bytes(data)
        for _ in range(args.rounds):
            t = time.perf_counter()
            json.loads(data)
            times["json.loads"].append(time.perf_counter() - t)
            out = {}
            for arm in args.arms:
                off, paused, compact, how = _ARMS[arm]
                for (m, n), fn in compiled.items():
                    setattr(m, n, None if (m, n) in off else fn)
                convert.read_and_join = real if compact else (lambda *a, **k: real(*a, **{**k, "compact": False}))
                emit.TEXT_EVENTS = None if how == "file decoded" else text_events
                convert.TWO_PASS_MIN_BYTES = min_bytes if how in ("file", "file span28") else 0
                scan._SPAN = _SPAN_28 if how == "file span28" else span
                dst = os.path.join(tmp, f"{arm}.pftrace")
                t = time.perf_counter()
                if how.startswith("file"):
                    write_joined_file(src, dst, ann, "all", label="torch.profiler trace")
                else:
                    with open(src, "rb") as f:
                        kept = f.read()  # what session 26's export kept on the profile
                    with paused_gc() if paused else contextlib.nullcontext():
                        trace = parse_trace_bytes(kept, "torch.profiler trace")
                        layout = convert.write_joined(trace, dst, ann, "all")
                        del trace, layout
                    del kept
                times[arm].append(time.perf_counter() - t)
                out[arm] = Path(dst).read_bytes()
            same = same and len(set(out.values())) == 1
    for (m, n), fn in compiled.items():
        setattr(m, n, fn)
    convert.read_and_join = real
    emit.TEXT_EVENTS, convert.TWO_PASS_MIN_BYTES, scan._SPAN = text_events, min_bytes, span
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"load after {os.getloadavg()[0]:.2f}")
    print("| arm | median s | best s | / `json.loads` | same bytes |")
    print("| --- | ---: | ---: | ---: | --- |")
    for k in times:
        print(f"| {k} | {med[k]:.3f} | {min(times[k]):.3f} | {med[k] / med['json.loads']:.2f}x | "
              f"{'' if k == 'json.loads' else 'yes' if same else 'NO'} |")
    for k in args.arms[1:]:
        print(f"| {args.arms[0]} / {k} | {med[args.arms[0]] / med[k]:.2f}x | | | |")


if __name__ == "__main__":
    main()
