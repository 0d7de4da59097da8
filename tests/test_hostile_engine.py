"""Engine faults not covered by tests/test_engine_robustness.py (issue 8, item 5).

Fake engine binaries that die, crash (SIGSEGV) or hang at start-up, for both engines; a missing
binary through the CLI; a query timeout and a full disk through ``sql``. Each must give one
EngineError / OutputError naming the trace or output, and leave no process behind: checked
by scanning /proc for descendants of this test process and for the fake's unique marker.
"""
from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

import pytest

from support import hostile_inputs as H
from support.engine_support import SLOW_SQL, pid_alive, portable_reason
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.errors import EngineError
from perfetto_graph_ann.query.engine import EngineConfig, process
from perfetto_graph_ann.query.session import open_trace

TRACE = H.FIXTURES / "two_branch.trace.json.gz"


def _children_of(pid: int) -> set:
    """Every live descendant of ``pid``, from /proc (no psutil)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parent[int(d)] = int(fields[1])
    out, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - out
        out |= frontier
    return out


def _marker_alive(marker: str) -> list:
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if marker.encode() in f.read() and pid_alive(int(d)):
                        found.append(int(d))
            except OSError:
                pass
    return found


def _settle(before: set, marker: str, seconds: float = 5.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not (_children_of(os.getpid()) - before) and not _marker_alive(marker):
            return
        time.sleep(0.05)
    assert _children_of(os.getpid()) - before == set(), "engine processes left behind"
    assert _marker_alive(marker) == []


def _script(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


# Node is probed with --version before use; the fakes answer like Node 20.
_NODE_VERSION = 'if [ "$1" = "--version" ]; then echo v20.11.0; exit 0; fi\n'
FAKES = {
    "dies": ("echo 'engine says: boom' >&2\nexit 3\n", "boom"),
    "segfaults": ("kill -SEGV $$\n", ""),
    "hangs": ("exec sleep 987{marker}\n", ""),
}


@pytest.mark.parametrize("engine", ["native", "portable"])
@pytest.mark.parametrize("fake", sorted(FAKES))
def test_broken_engine_binary_is_a_clear_error_and_leaves_nothing(tmp_path, engine, fake):
    if engine == "portable" and portable_reason():
        pytest.skip(portable_reason())
    marker = f"{os.getpid()}{abs(hash((engine, fake))) % 1000}"
    body, says = FAKES[fake]
    script = _script(tmp_path, f"fake_{engine}", (_NODE_VERSION if engine == "portable" else "") + body.format(marker=marker))
    cfg = EngineConfig(engine=engine, start_timeout_s=2.0,
                       **({"shell_path": script} if engine == "native" else {"node_path": script}))
    before = _children_of(os.getpid())
    engines_before = set(process.live_pids())
    t0 = time.monotonic()
    with pytest.raises(EngineError) as ei:
        open_trace(TRACE, engine=engine, config=cfg)
    assert time.monotonic() - t0 < 30
    msg = str(ei.value)
    assert msg.startswith(str(TRACE)), msg
    assert "start" in msg, msg  # "failed to start" / "did not start"
    if says:
        assert says in msg, msg
    _settle(before, "sleep 987" + marker)
    assert set(process.live_pids()) <= engines_before  # other tests' cached engines are not ours


@pytest.mark.parametrize("env,engine", [("PERFETTO_GRAPH_ANN_TP_SHELL", "native"), ("PERFETTO_GRAPH_ANN_NODE", "portable")])
def test_missing_engine_binary_cli_exit_2(monkeypatch, capsys, env, engine, tmp_path):
    missing = tmp_path / "no-such-binary"
    monkeypatch.setenv(env, str(missing))
    assert main(["sql", str(TRACE), "SELECT 1", "--engine", engine]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfetto-graph-ann sql: error: {TRACE}: ")
    assert f"{env}={missing}" in err and "fix:" in err


@pytest.mark.skipif(portable_reason() is not None, reason=str(portable_reason()))
def test_query_timeout_cli_exit_2_no_engine_left(capsys):
    before = _children_of(os.getpid())
    engines_before = set(process.live_pids())
    t0 = time.monotonic()
    assert main(["sql", str(TRACE), SLOW_SQL, "--engine", "portable", "--timeout", "1"]) == 2
    assert time.monotonic() - t0 < 30
    err = capsys.readouterr().err
    assert err.startswith(f"perfetto-graph-ann sql: error: {TRACE}: ")
    # --timeout is the whole command's budget (issue 32): the load may use it up before the query
    assert "ran past its --timeout of 1 s" in err and "was stopped" in err, err
    _settle(before, "\0never\0")
    assert set(process.live_pids()) <= engines_before  # other tests' cached engines are not ours


@pytest.mark.skipif(portable_reason() is not None, reason=str(portable_reason()))
def test_disk_full_on_sql_output(tmp_path, monkeypatch, capsys):
    from perfetto_graph_ann.util import atomic

    out = tmp_path / "rows.csv"
    out.write_bytes(H.PREVIOUS)
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, f):
            self._f = f

        def write(self, b):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self._f, name)

    monkeypatch.setattr(atomic.os, "fdopen", lambda fd, mode="r", *a, **k: Full(real_fdopen(fd, mode, *a, **k)))
    before = _children_of(os.getpid())
    rc = main(["sql", str(TRACE), "SELECT name FROM slice", "--engine", "portable", "--format", "csv", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{out}: no space left on device" in err
    assert out.read_bytes() == H.PREVIOUS
    assert H.leftovers(tmp_path) == []
    _settle(before, "\0never\0")


def test_engine_pid_bookkeeping_after_faults():
    """After the faults above no dead engine stays registered (atexit would signal a reused pid);
    each fault test checks on its own that it left no engine running."""
    assert [p for p in process.live_pids() if not pid_alive(p)] == []


def _corrupt_inputs(tmp_path: Path):
    import gzip
    import random

    from perfetto_graph_ann.pipeline.convert import convert

    good = tmp_path / "good.pftrace"
    convert(H.FIXTURES / "seed_block_eager.trace.json.gz", good)
    pf = good.read_bytes()
    js = gzip.decompress((H.FIXTURES / "two_branch.trace.json.gz").read_bytes())
    rnd = random.Random(8)
    flipped = bytearray(pf)
    for i in rnd.sample(range(len(pf)), 40):
        flipped[i] ^= 0xFF
    return pf, {
        "truncated_pftrace": pf[: len(pf) // 3],
        "flipped_pftrace": bytes(flipped),
        "junk_after_pftrace": pf + b"\xff" * 100,
        "huge_length_prefix": b"\x0a\xff\xff\xff\xff\x0f" + b"\x00" * 10,
        "truncated_json": js[: len(js) // 2],
        "truncated_gzip_json": gzip.compress(js)[:500],
    }


@pytest.mark.skipif(portable_reason() is not None, reason=str(portable_reason()))
def test_corrupt_traces_in_the_engine_are_input_errors_or_partial_loads(tmp_path):
    """The trace processor's own reading of broken files: rows from what it could read, or an
    InputError naming the file; never another exception, never an engine left running."""
    from perfetto_graph_ann.errors import InputError

    pf, cases = _corrupt_inputs(tmp_path)
    engines_before = set(process.live_pids())
    with open_trace(tmp_path / "good.pftrace", engine="portable") as s:
        full = s.query("SELECT COUNT(*) FROM slice").tuples()[0][0]
    outcomes = {}
    for name, data in cases.items():
        p = tmp_path / f"{name}.trace"
        p.write_bytes(data)
        before = _children_of(os.getpid())
        try:
            with open_trace(p, engine="portable") as s:
                n = s.query("SELECT COUNT(*) FROM slice").tuples()[0][0]
            assert n <= full, (name, n, full)
            outcomes[name] = "rows"
        except InputError as e:
            H.assert_typed_error(e, p)
            outcomes[name] = "input_error"
        _settle(before, "\0never\0")
        assert set(process.live_pids()) <= engines_before  # other tests' cached engines are not ours
    # these cannot be read past their damage: the engine must say so, not return rows
    for name in ("junk_after_pftrace", "truncated_json", "truncated_gzip_json"):
        assert outcomes[name] == "input_error", outcomes
