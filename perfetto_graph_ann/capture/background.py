"""Conversions off the caller's path: ``export(..., background=True)`` and ``trace_handler``.

The caller exports torch's Chrome JSON and saves the annotations (a binary sidecar) into a
temporary folder beside the output; a separate process (``python -m
perfetto_graph_ann.capture.background --worker PARENT IDLE``, started with ``subprocess``: fork +
exec, so nothing of a CUDA process runs in it, and no ``__main__`` of the user's is re-run as a
multiprocessing spawn would) is given the job as a JSON line on its standard input, reads, joins
and writes the output atomically, then leaves its outcome (the join report, or the error) in the
folder and exits. :class:`ExportHandle` waits for it, raises the same
:class:`~perfetto_graph_ann.errors.GraphAnnError`, and removes the folder.

A worker's start (the interpreter, numpy, the writer's modules: 0.4-0.6 s on the GPU machine's
host) is as long as torch's export of a 35-replay profile, so one is kept started ahead, the
*spare* (:func:`prepare_spare`: after an export, and when a ``trace_handler`` is made): it does
its imports while nothing waits for it, then blocks on its standard input until the next job
comes (a fresh process for every job: nothing of one conversion is left in the next). It leaves
after ``PERFETTO_GRAPH_ANN_EXPORT_SPARE`` seconds without a job, when this process ends, or when
this process is gone.

Conversions not waited for by their caller are waited for at interpreter exit, at most
:data:`EXIT_WAIT_S` seconds in all, with a message on stderr; errors found then are printed.
The worker runs in its own session (a Ctrl-C of the training stops the training, not the
conversion of a profile already taken) and removes its folder itself when its parent is gone.
Importing this module does not import torch.
"""
from __future__ import annotations

import atexit
import gc
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from ..errors import GraphAnnError, OutputError

if TYPE_CHECKING:
    from ..read.follow import Followed

__all__ = ["EXIT_WAIT_S", "ExportHandle", "has_spare", "NICE", "pending", "prepare_spare", "report_error",
           "save_for_worker", "start", "wait_all"]

#: The longest interpreter exit waits for conversions still running (seconds, all together).
EXIT_WAIT_S = 300.0
#: The worker's niceness increment: below the training it runs beside.
NICE = 10
_RESULT = "result.json"
_ERRLOG = "worker.stderr"
#: The worker's word on its standard output once its outcome is written (after ``b"r"``, ready).
_DONE = b"d"

_lock = threading.Lock()
_pending: List["ExportHandle"] = []
#: Workers whose outcome was collected while they were still leaving: reaped later (:func:`_reap`).
_leaving: List[subprocess.Popen] = []
#: The spare worker (its imports done, waiting for a job on its standard input) and the process
#: that started it: a child forked from this process never hands a job to its parent's spare.
_spare: "Optional[subprocess.Popen]" = None
_spare_owner = 0
#: When the spare was started (``time.monotonic``) and how long it waits for a job: it is handed
#: one only well before it may leave (:data:`_SPARE_MARGIN_S`), never a job it may not read.
_spare_since = 0.0
_spare_idle = 0.0
#: The settings a conversion reads, as they were when the spare started (it reads them at import:
#: a spare started before they changed is not handed a job).
_spare_env: tuple = ()
_SPARE_MARGIN_S = 2.0
#: How long a worker started for a job already written waits for it (seconds).
_IDLE_AT_ONCE = 60


class ExportHandle:
    """A conversion running in another process.

    ``out``: the file it writes (atomically: absent, or whole, never partial); ``label``: what
    messages call the trace. :meth:`result` waits and returns the join's report (what
    ``export(...).report`` is when blocking) or raises the error the blocking call would have
    raised; :meth:`done` says whether it has finished, without waiting.
    """

    def __init__(self, out: str, label: str, tmp: str, proc: subprocess.Popen):
        self.out, self.label, self._tmp, self._proc = out, label, tmp, proc
        self._outcome: Optional[tuple] = None
        self._told = False  # the worker said its outcome is written (see _told_in)
        self._lock = threading.Lock()

    def written(self, path: str) -> None:
        """A following worker's word (:func:`start` with ``follow``): torch has finished, and
        the whole trace is at ``path`` (the file it was reading, or a link to it)."""
        self._word({"ok": True, "path": path})

    def abandon(self) -> None:
        """A following worker's word: torch's export failed, there is nothing to convert. The
        worker ends without writing anything; its folder is removed."""
        self._end(False, "abandoned")

    def stop(self) -> None:
        """Stop the worker now (the caller was interrupted): SIGTERM, which its atomic write
        turns into an exit that removes its temporary file; its folder is removed. A file it
        finished before is left whole."""
        self._end(True, "stopped")

    def _end(self, terminate: bool, why: str) -> None:
        """The worker told to end (its standard input closed; ``terminate``: SIGTERM too),
        waited for (killed after 10 s), and its outcome settled as ``why``."""
        self._word(None)
        if self._proc.poll() is None:
            if terminate:
                self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        with _lock:
            if self in _pending:
                _pending.remove(self)
        self._outcome = (False, OutputError(self.out, f"the conversion of {self.label} was {why}"))
        shutil.rmtree(self._tmp, ignore_errors=True)

    def _word(self, doc: Optional[Dict[str, Any]]) -> None:
        stdin = self._proc.stdin
        if stdin is None or stdin.closed:
            return
        try:
            if doc is not None:
                stdin.write(json.dumps(doc).encode() + b"\n")
            stdin.close()
        except OSError:  # the worker has gone: its outcome says why
            pass

    def done(self) -> bool:
        """Whether the conversion has finished (successfully or not)."""
        if self._outcome is not None:
            return True
        try:
            if self._told_in(0.0):
                return True
        except (OSError, ValueError):  # the pipe closed meanwhile: a result() in another thread collected it
            pass
        return self._outcome is not None or self._proc.poll() is not None

    def _told_in(self, timeout: Optional[float]) -> bool:
        """Whether the worker says its outcome is written (one byte, ``_DONE``, on its standard
        output, within ``timeout`` seconds; None: however long it takes), or has closed that
        pipe (it ended, with or without an outcome). Waiting for this word, not for the process
        to end, keeps its exit (the kernel freeing a conversion's memory: 9-19 ms here for
        50-400 MB, ``benchmarks/worker_exit.py``) off the caller's wait. False where the pipe
        cannot be watched (not POSIX)."""
        import select

        if self._told:
            return True
        if not self._watchable():
            return False
        deadline = None if timeout is None else time.monotonic() + timeout
        fd = self._proc.stdout.fileno()
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return False
            chunk = os.read(fd, 64)  # the ready byte may come first; never a buffered read
            if not chunk or _DONE in chunk:
                self._told = True
                return True

    def _watchable(self) -> bool:
        """Whether the worker's word can be waited for on its standard output (POSIX, still open)."""
        out = self._proc.stdout
        return out is not None and not out.closed and os.name == "posix"

    def result(self, timeout: Optional[float] = None) -> Any:
        """Wait for the conversion (at most ``timeout`` seconds: ``subprocess.TimeoutExpired``
        after it, the conversion still running) and return the join's
        :class:`~perfetto_graph_ann.join.model.JoinReport`.

        Raises:
            GraphAnnError: what the blocking conversion raises (a malformed trace, annotations
                of another run, an output that cannot be written); nothing was written.
        """
        with self._lock:
            if self._outcome is None:
                if not self._told_in(timeout):
                    if self._watchable():
                        raise subprocess.TimeoutExpired(self._proc.args, timeout)
                    self._proc.wait(timeout)  # where the pipe cannot be watched; a timeout raises
                self._outcome = self._collect()
                with _lock:
                    if self in _pending:
                        _pending.remove(self)
                    if self._proc.poll() is None:  # still leaving: reaped later (_reap)
                        _leaving.append(self._proc)
        ok, value = self._outcome
        if ok:
            return value
        raise value

    def _collect(self) -> tuple:
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        try:
            try:
                with open(os.path.join(self._tmp, _RESULT), "rb") as f:
                    return _decode_outcome(json.loads(f.read()), self.out)
            except (OSError, ValueError, TypeError, KeyError):
                self._proc.wait()  # no outcome: the worker ended without one (its exit status says how)
                err = ""
                try:
                    with open(os.path.join(self._tmp, _ERRLOG), "r", errors="replace") as f:
                        err = f.read()[-2000:].strip()
                except OSError:
                    pass
                return False, OutputError(self.out, f"the background conversion of {self.label} ended without a result "
                                                    f"(exit status {self._proc.returncode})" + (f": {err}" if err else ""))
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)


def save_for_worker(annotations: Any, tmp: str) -> str:
    """Save ``annotations`` (binary sidecar) for a worker in ``tmp``, the folder its conversion
    owns; returns the path. On the caller's path, so the cheap way: each graph's part comes
    from its record (:meth:`GraphRecord.derived`: a process exporting each cycle serializes its
    graphs once), and the file is a scratch file, not an output (no fsync and rename: the worker
    reads it after this returns, and the folder goes when the conversion is collected)."""
    from ..annotations.sidecar_proto import to_bytes
    from ..util.atomic import open_scratch

    path = os.path.join(tmp, "annotations.pgab")
    data = to_bytes(annotations)
    with open_scratch(path) as f:
        f.write(data)
    return path


def start(src: str, annotations: Any, out: str, graph_lanes: Optional[str], default_stream: int, force: bool,
          label: str, tmp: str, follow: bool = False, nice: bool = True) -> ExportHandle:
    """Convert ``src`` (a Chrome JSON file) joined with ``annotations`` to ``out`` in another
    process: the spare where there is one to hand it to (:func:`prepare_spare`; its imports
    perhaps still running), else a new one. ``tmp`` is a folder this conversion owns (beside
    ``out``): the annotations are saved there, and it is removed when the conversion's outcome
    is collected.

    ``follow``: ``src`` is still to be written (by torch's ``export_chrome_trace``, which
    writes ``<src>.tmp`` and renames it): the worker reads it as it grows
    (:mod:`..read.follow`) until told :meth:`ExportHandle.written` (or
    :meth:`ExportHandle.abandon`), which the caller must say. ``nice``: the worker runs below
    the caller (:data:`NICE`); False where the caller waits for it."""
    from ..util.atomic import open_scratch

    if not sys.executable:  # an embedded interpreter: nothing to start the worker with
        raise OutputError(out, "no Python executable to run a background conversion with: use background=False")
    sidecar = save_for_worker(annotations, tmp)
    job = {"src": src, "annotations": sidecar, "source": annotations.source, "out": out, "graph_lanes": graph_lanes,
           "default_stream": default_stream, "force": force, "label": label, "tmp": tmp, "parent": os.getpid(),
           "follow": [src + ".tmp", src] if follow else None, "nice": nice}
    line = json.dumps(job).encode() + b"\n"
    with open_scratch(os.path.join(tmp, _ERRLOG)) as err:  # the worker appends its standard error here
        proc = _take_spare()
        if proc is None or not _hand(proc, line, follow):
            proc = _spawn(_IDLE_AT_ONCE, err)  # its imports' errors there too
            if not _hand(proc, line, follow):  # gone before reading its job: its exit status says so
                proc.wait()
    handle = ExportHandle(out, label, tmp, proc)
    with _lock:
        _pending.append(handle)
        _reap()
    if nice:  # the caller does not wait for this one: the next conversion's worker starts now
        prepare_spare()
    return handle


def _hand(proc: subprocess.Popen, line: bytes, follow: bool) -> bool:
    """Write the job ``line`` to ``proc``'s standard input (closed after it unless ``follow``:
    the parent's word comes later); False when the process is gone."""
    try:
        proc.stdin.write(line)
        if follow:
            proc.stdin.flush()
        else:
            proc.stdin.close()
        return True
    except (OSError, ValueError):  # a broken pipe: the spare ended (idle, killed) before its job
        try:
            proc.stdin.close()
        except OSError:
            pass
        return False


def _spawn(idle_s: float, stderr: Any = subprocess.DEVNULL) -> subprocess.Popen:
    """A new worker process, waiting at most ``idle_s`` seconds for its job on standard input
    (its standard error ``stderr`` until then: the job's log from then on)."""
    from .. import settings

    settings.switch(settings.WORKER_HEAP)  # a bad value is refused here, naming it, not by the worker
    env = settings.environment()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.basename(root) not in ("site-packages", "dist-packages"):  # a checkout: this very package
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen([sys.executable, "-m", "perfetto_graph_ann.capture.background", "--worker",
                             str(os.getpid()), repr(float(idle_s))],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env,
                            start_new_session=True, close_fds=True)


def prepare_spare() -> bool:
    """Have a spare worker ready for the next conversion (started now unless one is alive);
    False where there is none: ``PERFETTO_GRAPH_ANN_EXPORT_SPARE=off``, no Python executable
    or not POSIX (the worker waits on a pipe with ``select``), or it could not be started."""
    from .. import settings

    global _spare, _spare_owner, _spare_since, _spare_idle, _spare_env
    idle = settings.count_or_off(settings.EXPORT_SPARE)
    if idle is None or idle <= _SPARE_MARGIN_S or not sys.executable or os.name != "posix":
        return False
    with _lock:
        _reap()
        if _usable():
            return True
        _release(_spare)
        try:
            _spare, _spare_owner, _spare_since, _spare_idle = _spawn(idle), os.getpid(), time.monotonic(), idle
            _spare_env = _worker_settings()
        except OSError:
            _spare = None
            return False
    return True


def _usable() -> bool:
    """Whether :data:`_spare` may be handed a job (under :data:`_lock`): this process's, alive,
    not near the end of its wait, and started under the settings a conversion reads now."""
    return (_spare is not None and _spare_owner == os.getpid() and _spare.poll() is None
            and time.monotonic() < _spare_since + _spare_idle - _SPARE_MARGIN_S and _spare_env == _worker_settings())


def _worker_settings() -> tuple:
    """The raw values of the settings a conversion reads (``PURE_PYTHON`` at import, ``PROGRESS``, and
    ``WORKER_HEAP`` at the worker's start)."""
    from .. import settings

    return tuple(settings.raw(s) for s in (settings.PURE_PYTHON, settings.PROGRESS, settings.WORKER_HEAP))


def _release(proc: "Optional[subprocess.Popen]") -> None:
    """A spare not to be used told to leave (its standard input closed), not waited for."""
    if proc is not None and _spare_owner == os.getpid():
        for pipe in (proc.stdin, proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def has_spare(ready: bool = False) -> bool:
    """Whether a spare worker of this process may be handed a job; ``ready``: and has done its
    imports (it says so with one byte on its standard output)."""
    import select

    with _lock:
        if not _usable():
            return False
        return not ready or bool(select.select([_spare.stdout], [], [], 0)[0])


def _take_spare() -> "Optional[subprocess.Popen]":
    """The spare, now this job's (None where none may be handed a job)."""
    global _spare
    with _lock:
        usable, proc, _spare = _usable(), _spare, None
        if not usable:
            _release(proc)
            return None
        return proc


def _reap() -> None:
    """Collect the exit of the workers in :data:`_leaving` that have ended (under :data:`_lock`)."""
    _leaving[:] = [p for p in _leaving if p.poll() is None]


def _drop_spare() -> None:
    """The spare told to leave, not waited for (this process ends)."""
    global _spare
    with _lock:
        proc, _spare = _spare, None
        _release(proc)


def pending() -> List[ExportHandle]:
    """The conversions started in this process whose outcome nobody has collected yet."""
    with _lock:
        return list(_pending)


def report_error(handle: ExportHandle, e: BaseException) -> None:
    """Print a background conversion's error on stderr (it is never raised into the caller's loop)."""
    print(f"perfetto_graph_ann: the background conversion of {handle.label} to {handle.out} failed: {e}",
          file=sys.stderr, flush=True)


def wait_all(timeout: Optional[float] = None, quiet: bool = False) -> List[ExportHandle]:
    """Wait for every pending conversion (at most ``timeout`` seconds in all), printing the
    errors of those that failed; returns the handles still running."""
    deadline = None if timeout is None else time.monotonic() + timeout
    left: List[ExportHandle] = []
    for h in pending():
        try:
            h.result(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            left.append(h)
        except Exception as e:  # noqa: BLE001: a conversion's error, printed (nobody else will see it)
            if not quiet:
                report_error(h, e)
    return left


@atexit.register
def _at_exit() -> None:
    _drop_spare()
    with _lock:
        for p in _leaving:  # their outcome is collected: only their exit is left
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
        _reap()
    running = [h for h in pending() if not h.done()]
    if running:
        print(f"perfetto_graph_ann: waiting for {len(running)} background trace conversion"
              f"{'s' if len(running) != 1 else ''} (at most {EXIT_WAIT_S:.0f} s)", file=sys.stderr, flush=True)
    try:
        left = wait_all(EXIT_WAIT_S)
    except KeyboardInterrupt:
        left = [h for h in pending() if not h.done()]
    for h in left:
        print(f"perfetto_graph_ann: {h.out} is still being written by process {h._proc.pid}; it will appear when done",
              file=sys.stderr, flush=True)


class _Lines:
    """Lines from a pipe's file descriptor, read with ``select`` and ``os.read`` (never a
    buffered reader: a line read ahead into its buffer would be missed by ``select``)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf = fd, b""

    def line(self, timeout: float) -> Optional[bytes]:
        """The next whole line; None when none came within ``timeout`` seconds; ``b""`` at the
        end (the writer closed the pipe, or is gone), with any unfinished line dropped."""
        import select

        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if os.name == "posix" and (left <= 0 or not select.select([self.fd], [], [], left)[0]):
                return None  # (elsewhere select takes no pipe: the read waits; nothing follows there)
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                self.buf = b""
                return b""
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"


def _writer_word(lines: _Lines) -> Callable[[float], Optional[str]]:
    """The parent's word on the worker's standard input, as :class:`~..read.follow.Followed`
    asks for it: None while torch writes, the finished trace's path, or
    :class:`~..read.follow.Abandoned` (the parent said so, or went away)."""
    from ..read.follow import Abandoned

    def finished(timeout: float) -> Optional[str]:
        line = lines.line(timeout)
        if line is None:
            return None
        doc = json.loads(line) if line.strip() else None  # the parent writes one whole line, then closes
        if not isinstance(doc, dict) or not doc.get("ok") or not isinstance(doc.get("path"), str):
            raise Abandoned("torch's export of the profile did not finish")
        return doc["path"]

    return finished


def _run(job: Dict[str, Any], follow: "Optional[Followed]") -> tuple:
    """The worker's conversion: (True, report) or (False, the error); None when the parent
    abandoned it (nothing to convert, nobody to tell). ``follow``: ``job["src"]`` read as
    torch writes it."""
    import dataclasses

    from ..annotations.files import load_annotations
    from ..pipeline.convert import write_joined_file
    from ..read.follow import Abandoned

    try:
        ann = dataclasses.replace(load_annotations(job["annotations"]), source=job["source"])
        if follow is not None:  # torch is still writing: what the join needs of each graph alone, built now,
            from ..join.ahead import JoinAhead, prepare_graphs  # and of each replay whenever the reader waits

            prepare_graphs(ann)
            follow.ahead = JoinAhead(ann)
        layout = write_joined_file(job["src"], job["out"], ann, job["graph_lanes"], job["default_stream"],
                                   job["force"], job["label"], follow=follow)
        return True, layout.report
    except Abandoned:
        return None
    except GraphAnnError as e:
        return False, e
    except BaseException as e:  # noqa: BLE001: anything else, told to the caller as an output error
        return False, OutputError(job["out"], f"the background conversion of {job['label']} failed: "
                                              f"{type(e).__name__}: {e}\n{traceback.format_exc()}")


def _encode_outcome(outcome: tuple, out: str) -> bytes:
    """The outcome as JSON (never pickle: the package loads no code-running format): the join
    report's fields, or the error's class name, arguments and attributes; an error whose state
    JSON cannot hold travels as its text."""
    ok, value = outcome
    if ok:
        return json.dumps({"ok": True, "report": value.as_dict()}).encode()
    try:
        return json.dumps({"ok": False, "error": type(value).__name__, "args": _tag(list(value.args)),
                           "state": _tag(dict(value.__dict__))}).encode()
    except (TypeError, ValueError):
        return json.dumps({"ok": False, "error": "OutputError", "args": [f"{out}: {value}"],
                           "state": {"path": out, "problem": str(value)}}).encode()


def _decode_outcome(doc: Dict[str, Any], out: str) -> tuple:
    """(True, JoinReport) or (False, the GraphAnnError), from :func:`_encode_outcome`'s JSON;
    only this package's error classes are rebuilt (anything else is an OutputError)."""
    from .. import errors
    from ..join.model import JoinReport

    if doc["ok"]:
        return True, JoinReport(**doc["report"])
    cls = getattr(errors, doc["error"], None)
    if not (isinstance(cls, type) and issubclass(cls, GraphAnnError)):
        return False, OutputError(out, " ".join(str(a) for a in doc["args"]))
    e = cls.__new__(cls)
    e.args = tuple(_untag(doc["args"]))
    e.__dict__.update(_untag(doc["state"]))
    return False, e


def _tag(v: Any) -> Any:
    """Tuples kept as tuples through JSON (``{"__tuple__": [...]}``); other values as JSON has them."""
    if isinstance(v, tuple):
        return {"__tuple__": [_tag(x) for x in v]}
    if isinstance(v, list):
        return [_tag(x) for x in v]
    if isinstance(v, dict):
        return {k: _tag(x) for k, x in v.items()}
    return v


def _untag(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) == {"__tuple__"}:
            return tuple(_untag(x) for x in v["__tuple__"])
        return {k: _untag(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_untag(x) for x in v]
    return v


def _warm() -> None:
    """What a conversion imports, imported before its job comes (a spare's idle time)."""
    import numpy  # noqa: F401: the writer's plan imports it

    from ..annotations.files import load_annotations  # noqa: F401
    from ..pipeline.convert import write_joined_file  # noqa: F401
    from ..join.ahead import JoinAhead, prepare_graphs  # noqa: F401
    from ..read.follow import Followed  # noqa: F401
    from ..read.scan import scan_trace  # noqa: F401


def _await_job(lines: _Lines, parent: int, idle_s: float) -> Optional[Dict[str, Any]]:
    """The job the parent writes on standard input; None when it closes the pipe, goes away,
    or writes nothing for ``idle_s`` seconds (the spare leaves)."""
    deadline = time.monotonic() + idle_s
    while True:
        line = lines.line(min(1.0, max(0.0, deadline - time.monotonic())))
        if line:
            return json.loads(line)
        if line == b"" or os.getppid() != parent or time.monotonic() >= deadline:
            return None


def _main(argv: List[str]) -> int:
    from ..util.atomic import append_scratch_fd, atomic_write_bytes

    if len(argv) != 3 or argv[0] != "--worker":
        print("usage: python -m perfetto_graph_ann.capture.background --worker PARENT_PID IDLE_S "
              "(started by perfetto_graph_ann, the job on standard input)", file=sys.stderr)
        return 2
    from .. import settings

    if settings.switch(settings.WORKER_HEAP):
        from ..util.heap import keep_freed_memory

        keep_freed_memory()
    lines = _Lines(0)
    _warm()
    # One conversion, then os._exit. The conversion pauses the collector; re-enabled at its end, the
    # collector would first walk everything the conversion allocated before the outcome is written
    # (2.5-3.7 ms on the GPU host's Python 3.12 at 5,796 kernels). Nothing here is kept for long.
    gc.disable()
    try:
        os.write(1, b"r")  # ready: has_spare(ready=True) sees it
    except OSError:
        pass
    said = os.dup(1)  # the parent's pipe, for the word that the outcome is written (_DONE)
    os.dup2(2, 1)  # anything printed goes where errors go, never into that pipe
    job = _await_job(lines, int(argv[1]), float(argv[2]))
    if job is None:
        return 0
    fd = append_scratch_fd(os.path.join(job["tmp"], _ERRLOG))
    os.dup2(fd, 2)
    os.close(fd)
    if job.get("nice", True):
        try:
            os.nice(NICE)  # the training keeps its CPU: the file may appear a little later
        except (AttributeError, OSError):
            pass
    follow = None
    if job.get("follow"):
        from ..read.follow import Followed

        follow = Followed(job["follow"], _writer_word(lines))
    outcome = _run(job, follow)
    if outcome is None:  # abandoned: the parent removes the folder, unless it is gone
        if os.getppid() != job["parent"]:
            shutil.rmtree(job["tmp"], ignore_errors=True)
        return 3
    data = _encode_outcome(outcome, job["out"])
    tmp = job["tmp"]
    for name in ("annotations.pgab",):
        try:
            os.remove(os.path.join(tmp, name))
        except OSError:
            pass
    for read in {job["src"], follow.final if follow is not None and follow.final else job["src"]}:
        if os.path.dirname(os.path.abspath(read)) == os.path.abspath(tmp):
            try:
                os.remove(read)
            except OSError:
                pass
    if os.getppid() != job["parent"]:  # nobody will collect the outcome: leave nothing behind
        shutil.rmtree(tmp, ignore_errors=True)
        return 0 if outcome[0] else 2
    atomic_write_bytes(os.path.join(tmp, _RESULT), data, sync=False)  # read at once by the parent, then removed
    try:
        os.write(said, _DONE)  # the parent collects it now, not when this process has ended
    except OSError:
        pass
    return 0 if outcome[0] else 2


if __name__ == "__main__":
    code = _main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # everything is written and closed: the heap of a conversion is not torn down object by object
