"""Progress on a terminal, silence on a pipe (issue 17, point 4).

Each command runs in its own process on a synthetic trace (benchmarks/synth.py), once
with stderr on a pseudo-terminal (progress must show at once, naming the phase) and once
with stderr on a pipe (nothing may appear there); ``-q`` on a terminal is silent too.
stdout is a pipe in all runs, so results and progress never mix.

"At once" is checked by what has been imported when the first progress byte is written:
no heavy module (pandas, numpy) yet, as docs/design.md promises ("Progress"). A clock would
measure the machine: on a loaded 2-core machine (other sessions, the suite's own second
worker) the first byte took 2.6-4.5 s, as long as a plain ``import pandas`` started at the
same moment. The time itself is measured by benchmarks/progress_first_line.py (BENCHMARKS.md).
"""
from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from benchmarks.synth import write_trace
from support.engine_support import requires_portable

REPO = Path(__file__).resolve().parents[1]
N_EVENTS = 30_000
#: Modules the commands import only inside their first phase, after the progress line shows.
HEAVY = ("pandas", "numpy")

#: Runs the CLI as ``python -m perfetto_graph_ann`` does, with stderr wrapped so that its first
#: write records which HEAVY modules are loaded at that moment (JSON, into argv[1]).
_RUN_RECORDING_FIRST_WRITE = f"""
import json, runpy, sys
record, heavy = sys.argv.pop(1), {HEAVY!r}

class FirstWrite:
    def __init__(self, stream):
        self._stream, self._seen = stream, False

    def write(self, text):
        if text and not self._seen:
            self._seen = True
            with open(record, "w") as f:
                json.dump([m for m in heavy if m in sys.modules], f)
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)

sys.stderr = FirstWrite(sys.stderr)
runpy.run_module("perfetto_graph_ann", run_name="__main__", alter_sys=True)
"""


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    return write_trace(tmp_path_factory.mktemp("synth") / "synth.json", N_EVENTS)


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               COLUMNS="120", TERM="xterm")
    env.pop("PGA_PROGRESS", None)
    env.pop("PERFETTO_GRAPH_ANN_PROGRESS", None)
    return env


def _on_tty(argv, record: Path, timeout: float = 300):
    """Run the CLI with stderr on a pty: (seconds to the first stderr byte or None, stderr text,
    rc, the HEAVY modules loaded at the first write to stderr or None when nothing was written)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    chunks, first = [], []
    t0 = time.monotonic()

    def reader():
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO once the child closed its side
                return
            if not data:
                return
            if not first:
                first.append(time.monotonic() - t0)
            chunks.append(data)

    proc = subprocess.Popen([sys.executable, "-c", _RUN_RECORDING_FIRST_WRITE, str(record), *argv],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=_env(), cwd=REPO)
    os.close(slave)
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        proc.stdout.read()
        rc = proc.wait(timeout=timeout)
    finally:
        thread.join(10)
        os.close(master)
    heavy = json.loads(record.read_text()) if record.exists() else None
    return (first[0] if first else None), b"".join(chunks).decode("utf-8", "replace"), rc, heavy


def _on_pipe(argv, timeout: float = 300):
    r = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", *argv], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, env=_env(), cwd=REPO, timeout=timeout)
    return r.stderr, r.returncode


def _commands(src: Path, out: Path):
    return {
        "convert": (["convert", str(src), "-o", str(out / "c.pftrace")], "reading synth.json"),
        "report": (["report", str(src), "--engine", "portable"], "reading synth.json"),
        "sql": (["sql", str(out / "c.pftrace"),
                 "INCLUDE PERFETTO MODULE graph_ann.lanes; SELECT COUNT(*) AS n FROM graph_ann_lane",
                 "--engine", "portable"], "loading c.pftrace"),
    }


@requires_portable
@pytest.mark.timeout(1200)
def test_progress_on_a_tty_and_nothing_on_a_pipe(synthetic, tmp_path):
    commands = _commands(synthetic, tmp_path)
    for name in ("convert", "report", "sql"):  # convert first: sql reads its output
        argv, first_words = commands[name]
        seconds, text, rc, heavy = _on_tty(argv, tmp_path / f"{name}.first-write.json")
        assert rc == 0, (name, text)
        assert seconds is not None and heavy == [], (name, seconds, heavy, text[:500])
        assert first_words in text and f"{name} [" in text, (name, text[:500])
        if name in ("report", "sql"):
            assert "SQL module graph_ann.lanes" in text, (name, text[-2000:])
        err, rc = _on_pipe(argv)
        assert rc == 0 and err == "", (name, err)
        seconds, text, rc, heavy = _on_tty([*argv, "-q"], tmp_path / f"{name}-q.first-write.json")
        assert rc == 0 and text == "" and heavy is None, (name, text)
