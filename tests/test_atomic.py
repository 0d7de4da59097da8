"""Atomic outputs: an interrupted write leaves the previous file intact and no temp files."""
from __future__ import annotations

import errno
import gzip
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from perfetto_graph_ann.errors import OutputError
from perfetto_graph_ann.util.atomic import atomic_write, atomic_write_bytes


def _leftovers(d):
    return [p for p in os.listdir(d) if p.startswith(".pga-tmp-")]


def test_success_replaces_and_gzip_by_suffix(tmp_path):
    out = tmp_path / "x.bin"
    out.write_bytes(b"old")
    atomic_write_bytes(out, b"new")
    assert out.read_bytes() == b"new"
    gz = tmp_path / "y.json.gz"
    atomic_write_bytes(gz, b'{"a": 1}')
    assert gzip.decompress(gz.read_bytes()) == b'{"a": 1}'
    assert _leftovers(tmp_path) == []


def test_only_outputs_are_synced_a_scratch_outcome_is_renamed_whole_unsynced(tmp_path, monkeypatch):
    from perfetto_graph_ann.util import atomic

    synced = []
    real = os.fsync
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    atomic_write_bytes(tmp_path / "out.pftrace", b"out")
    assert len(synced) == 1
    atomic_write_bytes(tmp_path / "result.json", b"{}", sync=False)
    assert len(synced) == 1 and (tmp_path / "result.json").read_bytes() == b"{}"
    assert _leftovers(tmp_path) == []


def test_new_file_gets_umask_mode_and_old_file_keeps_its_mode(tmp_path):
    umask = os.umask(0o022)
    try:
        fresh = tmp_path / "fresh.pftrace"
        atomic_write_bytes(fresh, b"x")
        assert fresh.stat().st_mode & 0o777 == 0o644
        kept = tmp_path / "kept.pftrace"
        kept.write_bytes(b"old")
        kept.chmod(0o640)
        atomic_write_bytes(kept, b"new")
        assert kept.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(umask)


@pytest.mark.parametrize("name", ["t.txt", "t.json.gz"])
def test_text_mode_plain_and_gzip(tmp_path, name):
    out = tmp_path / name
    with atomic_write(out, "w") as f:
        f.write("héllo\n")
    data = out.read_bytes()
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    assert data.decode("utf-8") == "héllo\n"
    assert _leftovers(tmp_path) == []


def test_exception_keeps_previous_file(tmp_path):
    out = tmp_path / "x.pftrace"
    out.write_bytes(b"previous")
    with pytest.raises(RuntimeError):
        with atomic_write(out) as f:
            f.write(b"partial")
            raise RuntimeError("boom")
    assert out.read_bytes() == b"previous"
    assert _leftovers(tmp_path) == []


def test_disk_full_is_a_clear_error(tmp_path, monkeypatch):
    out = tmp_path / "x.pftrace"
    out.write_bytes(b"previous")

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OutputError) as ei:
        with atomic_write(out) as f:
            monkeypatch.setattr(f, "write", full)
            f.write(b"data")
    assert str(out) in str(ei.value) and "no space left" in str(ei.value)
    assert out.read_bytes() == b"previous"
    assert _leftovers(tmp_path) == []


def test_missing_folder_names_the_path(tmp_path):
    with pytest.raises(OutputError) as ei:
        atomic_write_bytes(tmp_path / "nope" / "x.pftrace", b"")
    assert "nope" in str(ei.value)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_write_keeps_previous_file(tmp_path, sig):
    out = tmp_path / "x.pftrace"
    out.write_bytes(b"previous")
    ready = tmp_path / "ready"
    # The writer handles SIGINT as an interactive Python does (KeyboardInterrupt), whatever
    # pytest was started with: a background job (`pytest &` in a script, CI runners) starts
    # with SIGINT ignored, and a child inherits the ignore.
    code = textwrap.dedent(f"""
        import signal, time
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from perfetto_graph_ann.util.atomic import atomic_write
        with atomic_write({str(out)!r}) as f:
            f.write(b"partial" * 1000)
            open({str(ready)!r}, "w").close()
            time.sleep(30)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert time.monotonic() < deadline, "writer never started"
        time.sleep(0.02)
    proc.send_signal(sig)
    assert proc.wait(timeout=20) != 0
    assert out.read_bytes() == b"previous"
    assert _leftovers(tmp_path) == []
