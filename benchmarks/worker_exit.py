"""Benchmark (issue 33): how long a conversion worker's exit keeps its parent waiting.

    python benchmarks/worker_exit.py [--mb 50 200 400] [--rounds 3]

A background worker (``capture/background.py``) ends with ``os._exit`` once its outcome is
written; the kernel then frees its memory before the parent's ``wait()`` returns. Each round
starts a child holding ``--mb`` MB of buffers and ~2 million small strings (a conversion's heap
is mostly Python objects), which writes the time on its stdout and calls ``os._exit``; the
parent reads that time and reports how long after it its ``wait()`` returned. Since session 40
the caller collects the outcome at the worker's word on that pipe instead, so this time is off
its wait.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time

_CHILD = r'''
import os, sys, time
held = [bytearray(1 << 20) for _ in range(int(sys.argv[1]))]
names = [str(i) * 3 for i in range(2_000_000)]
os.write(1, b"%.6f" % time.time())
os._exit(0)
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, nargs="+", default=[50, 200, 400])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"{platform.machine()}, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")
    print("| buffers MB | exit to wait() returned, ms (median) | rounds |")
    print("| ---: | ---: | --- |")
    for mb in args.mb:
        ms = []
        for _ in range(args.rounds):
            p = subprocess.Popen([sys.executable, "-c", _CHILD, str(mb)], stdout=subprocess.PIPE)
            said = float(p.stdout.read())  # read to the end: the pipe closes as the child's exit begins
            p.wait()
            ms.append(1000 * (time.time() - said))
            p.stdout.close()
        print(f"| {mb} | {statistics.median(ms):.2f} | {', '.join(f'{m:.2f}' for m in ms)} |")


if __name__ == "__main__":
    main()
