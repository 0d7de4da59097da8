"""Every output survives interruption end to end (issue 8, item 2).

Two kinds of proof, each in a child process so the signal hits a real program:

* timing: ``perfetto-graph-ann convert`` on a large synthetic trace is sent SIGINT / SIGTERM as
  soon as its temporary output appears, i.e. while it streams packets;
* placement: for every writer (convert .pftrace / .pftrace.gz / Chrome JSON, merge, sidecar
  save binary / JSON, ``sql -o``) the signal is raised from inside the write itself: the moment
  its temporary file exists, in the middle of the data, and at the fsync just before the rename.

Either way the previous output must be byte-identical afterwards and no temporary file left.
A source scan checks that no module writes a file without ``atomic_write``.
"""
from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgspec
import pytest

from support import hostile_inputs as H
from support.interrupt import sigint_as_in_a_shell

PACKAGE = Path(__file__).resolve().parents[1] / "perfetto_graph_ann"
REPO = PACKAGE.parent
PREVIOUS = H.PREVIOUS


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory) -> Path:
    """~250k events: the eager seed block repeated with shifted times (msgspec: seconds to build).

    ``benchmarks/synth.py`` builds exact-decimal traces but takes ~20 s for this size; here only
    size matters, so times are plain floats.
    """
    doc = H.base_trace("seed_block_eager")
    body = [e for e in doc["traceEvents"] if e.get("ph") != "M"]
    meta = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    t0 = float(min(e["ts"] for e in body if "ts" in e))
    t1 = float(max(e["ts"] + e.get("dur", 0) for e in body if "ts" in e))
    span = t1 - t0 + 10.0
    plain = json.loads(H.encode(dict(doc, traceEvents=body)))["traceEvents"]
    events = list(json.loads(H.encode(meta)))
    for rep in range(250_000 // len(plain) + 1):
        shift = rep * span
        for e in plain:
            e2 = dict(e)
            if "ts" in e2:
                e2["ts"] = e2["ts"] + shift
            events.append(e2)
    head = {k: json.loads(H.encode(v)) for k, v in doc.items() if k != "traceEvents"}
    head["traceEvents"] = events
    p = tmp_path_factory.mktemp("big") / "big.trace.json"
    p.write_bytes(msgspec.json.encode(head))
    return p


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("out_name", ["out.pftrace"])
def test_convert_cli_interrupted_while_streaming(big_trace, tmp_path, sig, out_name):
    out = tmp_path / out_name
    out.write_bytes(PREVIOUS)
    with sigint_as_in_a_shell():
        proc = subprocess.Popen([sys.executable, "-m", "perfetto_graph_ann", "convert", str(big_trace), "-o", str(out),
                                 "--no-progress"], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not H.leftovers(tmp_path):
        assert proc.poll() is None, f"finished before its output file was seen: {proc.communicate()}"
        assert time.monotonic() < deadline
        time.sleep(0.002)
    time.sleep(0.05)  # well inside the packet stream
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode in ((130,) if sig == signal.SIGINT else (143, -signal.SIGTERM)), (proc.returncode, stderr)
    assert out.read_bytes() == PREVIOUS
    assert H.leftovers(tmp_path) == []
    assert b"Traceback" not in stderr


# ---- the signal raised from inside each writer ------------------------------------------

_DRIVER = textwrap.dedent('''
    import os, signal, sys
    from perfetto_graph_ann.util import atomic

    sig, where, action = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    fired = []

    def fire():
        if not fired:
            fired.append(1)
            os.kill(os.getpid(), sig)

    if where == "fsync":
        real_fsync = os.fsync
        def fsync(fd):
            fire()
            return real_fsync(fd)
        atomic.os.fsync = fsync
    elif where == "created":
        real_create = atomic._create
        def create(tmp):
            """The output's temporary file, the signal sent the moment it exists."""
            got = real_create(tmp)
            fire()
            return got
        atomic._create = create
    elif where == "mid_write":
        real_fdopen = os.fdopen
        class Raw:
            """The temporary file; the first write that reaches it raises the signal halfway."""
            def __init__(self, f):
                self._f = f
            def write(self, b):
                half = len(b) // 2
                n = self._f.write(b[:half])
                self._f.flush()
                fire()
                return n + self._f.write(b[half:])
            def __getattr__(self, name):
                return getattr(self._f, name)
        atomic.os.fdopen = lambda fd, mode="r", *a, **k: Raw(real_fdopen(fd, mode, *a, **k))

    exec(action)
    print("FINISHED")
''')


def _rank_copy(tmp_path: Path, rank: int) -> Path:
    doc = H.base_trace("allreduce_eager_rank0")
    doc["distributedInfo"]["rank"] = rank
    p = tmp_path / f"rank{rank}.trace.json"
    p.write_bytes(H.encode(doc))
    return p


def _actions(tmp_path: Path):
    fx = H.FIXTURES
    two = fx / "two_branch.trace.json.gz"
    cap = fx / "two_branch.capture.json"
    main = "from perfetto_graph_ann.cli.main import main; rc = main({argv!r}); sys.exit(rc)"
    r0, r1 = _rank_copy(tmp_path, 0), _rank_copy(tmp_path, 1)
    save = ("from perfetto_graph_ann.annotations.files import load_annotations, save_annotations; "
            f"save_annotations({{out!r}}, load_annotations({str(cap)!r}))")
    return {
        "convert.pftrace": ("out.pftrace", main.format(argv=["convert", str(two), "-o", "{out}", "--annotations", str(cap), "-q"])),
        "convert.pftrace.gz": ("out.pftrace.gz", main.format(argv=["convert", str(two), "-o", "{out}", "-q"])),
        "chrome_json": ("out.json", main.format(argv=["convert", str(two), "-o", "{out}", "--annotations", str(cap), "-q"])),
        "chrome_json.gz": ("out.json.gz", main.format(argv=["convert", str(two), "-o", "{out}", "-q"])),
        "merge": ("merged.pftrace", main.format(argv=["merge", str(r0), str(r1), "-o", "{out}"])),
        "sidecar.binary": ("ann.pga", save),
        "sidecar.json": ("ann.json", save),
    }


WRITERS = ["convert.pftrace", "convert.pftrace.gz", "chrome_json", "chrome_json.gz", "merge", "sidecar.binary", "sidecar.json"]


def _run_driver(tmp_path: Path, sig: int, where: str, action: str) -> subprocess.CompletedProcess:
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER)
    with sigint_as_in_a_shell():
        return subprocess.run([sys.executable, str(driver), str(int(sig)), where, action], cwd=tmp_path,
                              env=_env(), capture_output=True, timeout=120)


@pytest.mark.parametrize("where", ["created", "mid_write", "fsync"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("writer", WRITERS)
def test_every_writer_interrupted_keeps_previous(tmp_path, writer, sig, where):
    name, action = _actions(tmp_path)[writer]
    out = tmp_path / name
    out.write_bytes(PREVIOUS)
    action = action.replace("{out}", str(out)).replace("{out!r}", repr(str(out)))
    r = _run_driver(tmp_path, sig, where, action)
    assert b"FINISHED" not in r.stdout, f"the signal did not stop {writer}: {r.stderr.decode()[-2000:]}"
    assert r.returncode != 0
    assert out.read_bytes() == PREVIOUS
    assert H.leftovers(tmp_path) == []


@pytest.mark.parametrize("writer", WRITERS)
def test_every_writer_uninterrupted_replaces(tmp_path, writer):
    """The same drivers without a signal do replace the file (so the test above can fail)."""
    name, action = _actions(tmp_path)[writer]
    out = tmp_path / name
    out.write_bytes(PREVIOUS)
    action = action.replace("{out}", str(out)).replace("{out!r}", repr(str(out)))
    r = _run_driver(tmp_path, 0, "none", action)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert out.read_bytes() != PREVIOUS and out.stat().st_size > 0
    assert H.leftovers(tmp_path) == []


def test_sql_output_interrupted_keeps_previous(tmp_path):
    from support.engine_support import portable_reason

    reason = portable_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "rows.csv"
    out.write_bytes(PREVIOUS)
    argv = ["sql", str(H.FIXTURES / "two_branch.trace.json.gz"), "SELECT name, ts FROM slice", "--engine", "portable",
            "--format", "csv", "-o", str(out)]
    r = _run_driver(tmp_path, signal.SIGINT, "mid_write",
                    f"from perfetto_graph_ann.cli.main import main; sys.exit(main({argv!r}))")
    assert b"FINISHED" not in r.stdout and r.returncode != 0
    assert out.read_bytes() == PREVIOUS
    assert H.leftovers(tmp_path) == []


def test_disk_full_on_convert_output_is_a_clear_error(tmp_path, monkeypatch, capsys):
    """ENOSPC in the middle of the packet stream: exit 2, message names OUT, previous kept."""
    import errno

    from perfetto_graph_ann.cli.main import main
    from perfetto_graph_ann.util import atomic

    out = tmp_path / "out.pftrace"
    out.write_bytes(PREVIOUS)
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, f):
            self._f, self._n = f, 0

        def write(self, b):
            self._n += len(b)
            if self._n > 2000:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self._f.write(b)

        def __getattr__(self, name):
            return getattr(self._f, name)

    monkeypatch.setattr(atomic.os, "fdopen", lambda fd, mode="r", *a, **k: Full(real_fdopen(fd, mode, *a, **k)))
    rc = main(["convert", str(H.FIXTURES / "seed_block_eager.trace.json.gz"), "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{out}: no space left on device" in err
    assert out.read_bytes() == PREVIOUS
    assert H.leftovers(tmp_path) == []


# ---- no writer bypasses atomic_write -----------------------------------------------------

def test_no_module_writes_files_directly():
    """open(..., 'w'/'a'/'x'), Path.write_text/write_bytes, os.open(O_CREAT/O_WRONLY) only in util/atomic.py."""
    found = []
    for py in sorted(PACKAGE.rglob("*.py")):
        rel = py.relative_to(PACKAGE)
        if str(rel) == os.path.join("util", "atomic.py") or py.name.endswith("_pb2.py"):
            continue
        for node in ast.walk(ast.parse(py.read_text(), filename=str(py))):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else (fn.attr if isinstance(fn, ast.Attribute) else "")
            if name in ("write_text", "write_bytes"):
                found.append(f"{rel}:{node.lineno} {name}()")
            elif name == "open" and not (isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name)
                                          and fn.value.id in ("gzip", "webbrowser", "tarfile", "zipfile")):
                mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
                if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
                    found.append(f"{rel}:{node.lineno} open(mode={mode.value!r})")
                elif mode is not None and not isinstance(mode, ast.Constant):
                    found.append(f"{rel}:{node.lineno} open(mode=<computed>)")
            elif name == "open" and isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id == "gzip":
                mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
                if isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wax+"):
                    found.append(f"{rel}:{node.lineno} gzip.open(mode={mode.value!r})")
    assert found == []
