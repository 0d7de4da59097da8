"""Small but visible (issue 32, item 8).

``fleet`` on the demo's own folder skips its ``summary.json`` (and says so); a SIGTERM
during ``report`` leaves nothing in the temporary folder; ``open`` exits 2 on its timeout
like every other error and refuses what is not a trace; the demo asks for a missing native
engine once, not once per scenario; ``demo_out/`` is ignored by git. (The native engine's
download, off by default and never writing the home folder: tests/test_engine_resolve.py;
CSV of several tables, one file each: tests/test_cli_vocabulary.py.)
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import fixture_capture, fixture_trace
from support.engine_support import requires_portable
from perfetto_graph_ann.cli.main import main

REPO = Path(__file__).resolve().parents[1]
SEED, CAP = str(fixture_trace("seed_block_annotated")), str(fixture_capture("seed_block_annotated"))


@requires_portable
def test_fleet_on_the_demo_folder_skips_its_summary(tmp_path, capsys):
    demo_out = tmp_path / "demo_out"
    assert main(["demo", "--out", str(demo_out), "--shipped", "--no-sql"]) == 0
    assert (demo_out / "summary.json").is_file()
    capsys.readouterr()
    assert main(["fleet", str(demo_out), "--no-progress", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert f"skipped 1 file(s) that are not traces: {demo_out / 'summary.json'}" in captured.err
    assert '"skipped": [' in captured.out and "summary.json" in captured.out
    # named on its own, a file that is not a trace is still an error naming it
    assert main(["fleet", str(demo_out / "summary.json"), "--no-progress"]) == 2
    assert f"error: {demo_out / 'summary.json'}: " in capsys.readouterr().err


@requires_portable
def test_sigterm_during_report_leaves_no_temporary_files(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "perfetto_graph_ann", "report", SEED, "-a", CAP,
                             "--engine", "portable", "-o", str(tmp_path / "r.txt")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp.glob("pga-session-*/trace-*.pftrace")):
            assert proc.poll() is None, "report ended before its session started"
            assert time.monotonic() < deadline, "no session folder appeared"
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err.decode(errors="replace")
    time.sleep(0.5)  # the engine's process group is gone with it
    assert sorted(p.name for p in tmp.iterdir()) == [], list(tmp.rglob("*"))
    assert not (tmp_path / "r.txt").exists()


def _a_trace(tmp_path: Path) -> Path:
    p = tmp_path / "t.pftrace"
    p.write_bytes(b"".join(b"\x0a\x80\x01" + bytes(128) for _ in range(4)))
    return p


def test_open_exits_2_on_its_timeout(tmp_path, capsys):
    assert main(["open", str(_a_trace(tmp_path)), "--no-browser", "--port", "0", "--timeout", "0.3"]) == 2
    assert "not fetched within 0.3 s" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"# README\nnot a trace\n", b"\x00\x01\x02garbage", b""])
def test_open_refuses_what_is_not_a_trace(tmp_path, capsys, content):
    f = tmp_path / "notes.pftrace"
    f.write_bytes(content)
    assert main(["open", str(f), "--no-browser", "--port", "0", "--timeout", "0.5"]) == 2
    err = capsys.readouterr().err
    assert f"error: {f}: " in err and ("not a trace" in err or "empty" in err), err
    assert "serving" not in capsys.readouterr().out


def test_the_demo_asks_for_a_missing_native_engine_once(tmp_path, monkeypatch):
    import io

    from perfetto_graph_ann.demo.runner import DemoConfig, run_demo
    from perfetto_graph_ann.query.engine import resolve

    calls = []

    def failing_download(manifest):
        calls.append(manifest)
        raise RuntimeError("curl: (6) Could not resolve host")

    monkeypatch.setattr("perfetto.prebuilts.perfetto_prebuilts.get_perfetto_prebuilt", failing_download)
    monkeypatch.setattr(resolve, "_failed_download", None, raising=False)
    for var in ("PERFETTO_GRAPH_ANN_TP_SHELL", "TRACE_PROCESSOR_SHELL"):
        monkeypatch.delenv(var, raising=False)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_ALLOW_DOWNLOAD", "1")  # even where the download is allowed
    out = io.StringIO()
    run_demo(DemoConfig(out_dir=tmp_path / "d", mode="shipped", engine="native"), out=out)
    assert len(calls) == 1, out.getvalue()
    text = out.getvalue()
    assert text.count("SQL lane summary skipped") == 3  # every joined scenario says it ...
    assert text.count("No native trace_processor_shell found") == 1  # ... the first one why


def test_demo_out_is_ignored_by_git():
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        patterns = (REPO / ".gitignore").read_text().splitlines()
        assert "/demo_out/" in patterns
        return
    r = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", "--no-index", "demo_out/summary.json"])
    assert r.returncode == 0, "demo_out/ (the README's first command writes it) is not in .gitignore"
