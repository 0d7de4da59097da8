"""Benchmark (issue 33): the join's per-replay work done while torch writes the JSON a worker follows.

    python benchmarks/join_ahead.py TRACE.json[.gz] ANNOTATIONS.json [--rounds 8] [--mb-s 60]

What a conversion worker does with ``follow`` (``capture/background.py``'s ``_run``), in this
process: the sidecar loaded afresh and its per-graph values built (``join.ahead.prepare_graphs``),
then ``write_joined_file`` of a file another process writes meanwhile, read through a
:class:`~perfetto_graph_ann.read.follow.Followed`. The writer (a child process, as torch writes
from the profiled one) writes ``<path>.tmp`` in 256 kB pieces at ``--mb-s`` MB/s, renames it and
says so with the time on its stdout. Arms, alternating each round: ``ahead``, a
:class:`~perfetto_graph_ann.join.ahead.JoinAhead` on the follow (the worker's way since session
43), and ``none``. Reports the median ms from the writer's word to the output written, the ratio,
how many replays' results the join took as made, and checks both arms wrote the same bytes.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.proc import plain_copy  # noqa: E402
from perfetto_graph_ann.annotations.files import load_annotations  # noqa: E402
from perfetto_graph_ann.join.ahead import JoinAhead, prepare_graphs  # noqa: E402
from perfetto_graph_ann.pipeline.convert import write_joined_file  # noqa: E402
from perfetto_graph_ann.read.follow import Followed  # noqa: E402
from perfetto_graph_ann.util.collector import paused_gc  # noqa: E402

_WRITER = r'''
import os, sys, time
src, path, rate = sys.argv[1], sys.argv[2], float(sys.argv[3]) * 1e6
data = open(src, "rb").read()
piece = 256 << 10
t0 = time.perf_counter()
with open(path + ".tmp", "wb") as f:
    for at in range(0, len(data), piece):
        f.write(data[at:at + piece])
        f.flush()
        due = t0 + (at + piece) / rate
        while time.perf_counter() < due:  # a writer busy on its core, as Kineto's
            pass
os.rename(path + ".tmp", path)
sys.stdout.write("%.6f\n" % time.time())
sys.stdout.flush()
'''


def _one(src: str, annotations: str, d: str, mb_s: float, ahead: bool) -> tuple:
    path, out = os.path.join(d, "profile.json"), os.path.join(d, "out.pftrace")
    for p in (path, path + ".tmp", out):
        if os.path.exists(p):
            os.remove(p)
    ann = load_annotations(annotations)
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, src, path, str(mb_s)], stdout=subprocess.PIPE)
    said = []

    def finished(timeout: float):
        if select.select([writer.stdout], [], [], timeout)[0]:
            said.append(float(writer.stdout.readline()))
            return path
        return None

    with paused_gc():
        prepare_graphs(ann)
        follow = Followed([path + ".tmp", path], finished)
        if ahead:
            follow.ahead = JoinAhead(ann)
        layout = write_joined_file(path, out, ann, "all", 7, False, "profile", follow=follow)
        done = time.time()
    writer.wait()
    writer.stdout.close()
    taken = dict(follow.ahead.made.taken) if ahead else {}
    with open(out, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return 1e3 * (done - said[0]), taken, digest, layout.report.as_dict()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("annotations")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--mb-s", type=float, default=60.0)
    args = ap.parse_args()
    got = {"ahead": [], "none": []}
    digests, taken, reports = set(), None, []
    with tempfile.TemporaryDirectory() as d:
        src = plain_copy(args.trace, d, "source.json")
        size = os.path.getsize(src)
        _one(src, args.annotations, d, args.mb_s, True)  # untimed: this process's first conversion
        for r in range(args.rounds):
            for arm in (("ahead", "none") if r % 2 == 0 else ("none", "ahead")):
                ms, t, digest, report = _one(src, args.annotations, d, args.mb_s, arm == "ahead")
                got[arm].append(ms)
                digests.add(digest)
                reports.append(report)
                if arm == "ahead":
                    taken = t
    same = len(digests) == 1 and all(r == reports[0] for r in reports)
    print(f"{platform.machine()}, Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} "
          f"UTC; {Path(args.trace).name} ({size / 1e6:.1f} MB) written at {args.mb_s:g} MB/s, {args.rounds} rounds")
    print("| arm | ms from the writer's word to the output written (median) | rounds |")
    print("| --- | ---: | --- |")
    for arm, ms in got.items():
        print(f"| {arm} | {statistics.median(ms):.1f} | {', '.join(f'{m:.1f}' for m in ms)} |")
    print(f"ahead / none: {statistics.median(got['ahead']) / statistics.median(got['none']):.3f}; taken as made "
          f"(last round): {taken}; same output bytes and report in every round: {same}")


if __name__ == "__main__":
    main()
