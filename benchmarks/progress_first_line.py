"""Time to the first progress byte of the CLI on a terminal (issue 17's "progress at once").

Moved out of tests/test_progress_tty.py (issue 37: a clock in a test measures the machine; the
test checks instead that no heavy module is imported before the first progress byte). Each
command (``convert``, ``report``, ``sql`` as the test runs them, on a synthetic trace of
``--events`` events, benchmarks/synth.py) runs ``--rounds`` times with stderr on a
pseudo-terminal; beside each run, started at the same moment, a plain ``python -c "import
pandas"`` gives the machine's speed at that moment. Prints a JSON report (medians, seconds)
with the load average.

    python3 benchmarks/progress_first_line.py --rounds 5
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.synth import write_trace  # noqa: E402


def first_byte(argv, env):
    """(seconds to the CLI's first stderr byte on a pty, seconds of a concurrent ``import pandas``)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    first = []
    t0 = time.monotonic()
    ref = subprocess.Popen([sys.executable, "-c", "import pandas"], env=env)
    proc = subprocess.Popen([sys.executable, "-m", "perfetto_graph_ann", *argv], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave, env=env, cwd=REPO)
    os.close(slave)

    def reader():
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            if not first:
                first.append(time.monotonic() - t0)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    ref.wait()
    ref_s = time.monotonic() - t0
    proc.wait()
    thread.join(10)
    os.close(master)
    return (first[0] if first else None), ref_s


def main(argv=None):
    ap = argparse.ArgumentParser(description="Time to the CLI's first progress byte on a terminal.")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--events", type=int, default=30_000)
    args = ap.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               COLUMNS="120", TERM="xterm")
    env.pop("PGA_PROGRESS", None)
    env.pop("PERFETTO_GRAPH_ANN_PROGRESS", None)
    report = {"load_average_start": os.getloadavg(), "rounds": args.rounds, "events": args.events}
    with tempfile.TemporaryDirectory(prefix="pga-progress-") as d:
        src = write_trace(Path(d) / "synth.json", args.events)
        out = Path(d) / "c.pftrace"
        commands = {
            "convert": ["convert", str(src), "-o", str(out)],
            "report": ["report", str(src), "--engine", "portable"],
            "sql": ["sql", str(out), "SELECT COUNT(*) AS n FROM slice", "--engine", "portable"],
        }
        for name, cmd in commands.items():  # convert first: sql reads its output
            runs = [first_byte(cmd, env) for _ in range(args.rounds)]
            firsts = [f for f, _ in runs if f is not None]
            report[name] = {"first_progress_s_median": statistics.median(firsts) if firsts else None,
                            "concurrent_import_pandas_s_median": statistics.median(r for _, r in runs),
                            "runs_without_progress": len(runs) - len(firsts)}
    report["load_average_end"] = os.getloadavg()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
