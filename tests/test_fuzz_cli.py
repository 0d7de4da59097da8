"""The CLI on hostile inputs, as a user runs it: a real subprocess per case.

``convert`` and ``lanes`` on mutated traces and sidecars: exit 0 with a decodable output, or
exit 2 with one line ``perfetto-graph-ann <cmd>: error: <path>: <problem>`` on stderr, no
traceback and no output file. Few cases (each starts Python); the library-level fuzz tests
cover the space.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import hostile_inputs as H
from test_fuzz_sidecar import hostile_sidecar

REPO = Path(__file__).resolve().parents[1]


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "perfetto_graph_ann", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def _check_failure(r: subprocess.CompletedProcess, cmd: str, path: Path) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.stderr.startswith(f"perfetto-graph-ann {cmd}: error: {path}: "), r.stderr[-3000:]


N_CLI = int(os.environ.get("PGA_FUZZ_CLI", "6"))


@given(H.hostile_trace(), st.sampled_from(["out.pftrace", "out.json.gz"]))
@settings(max_examples=N_CLI, database=None)
def test_convert_cli_on_hostile_traces(case, out_name):
    _convert_cli_case(case, out_name)


def _convert_cli_case(case, out_name) -> str:
    with H.scratch("pga-cli-") as folder:
        src = folder / "in.json"
        src.write_bytes(case.data())
        out = folder / out_name
        argv = ["convert", str(src), "-o", str(out), "--no-progress"]
        if case.name in H.CAPTURE_NAMES:
            argv += ["--annotations", str(H.FIXTURES / f"{case.name}.capture.json")]
        r = _cli(*argv, cwd=folder)
        if r.returncode == 0:
            assert "Traceback" not in r.stderr
            if out_name.endswith(".pftrace"):
                H.decode_pftrace(out.read_bytes())
            else:
                from perfetto_graph_ann.read.kineto import read_trace

                read_trace(out)
        else:
            _check_failure(r, "convert", src)
            assert not out.exists()
        assert H.leftovers(folder) == []
        return "ok" if r.returncode == 0 else "exit_2"


@given(hostile_sidecar())
@settings(max_examples=N_CLI, database=None)
def test_lanes_cli_on_hostile_sidecars(case):
    with H.scratch("pga-cli-") as folder:
        src = folder / ("in.pga" if case.form == "binary" else "in.capture.json")
        src.write_bytes(case.data())
        trace = H.FIXTURES / f"{case.name}.trace.json.gz"
        r = _cli("lanes", str(trace), "--annotations", str(src), "--no-sql", cwd=folder)
        if r.returncode == 0:
            assert "Traceback" not in r.stderr
            assert "GPU 0" in r.stdout
        else:
            _check_failure(r, "lanes", src)


@pytest.mark.fuzz_long
@pytest.mark.timeout(3000)
def test_convert_cli_long():
    import collections
    import time

    from test_fuzz_convert import _report

    counts: collections.Counter = collections.Counter()

    @given(H.hostile_trace())
    @settings(max_examples=int(os.environ.get("PGA_FUZZ_LONG_CLI", "60")), database=None)
    def case(c):
        counts[_convert_cli_case(c, "out.pftrace")] += 1

    t0 = time.monotonic()
    case()
    _report("cli_convert_long", counts, time.monotonic() - t0)
