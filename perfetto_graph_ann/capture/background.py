"""Conversions off the caller's path: ``export(..., background=True)`` and ``trace_handler``.

The caller exports torch's Chrome JSON and saves the annotations (a binary sidecar) into a
temporary folder beside the output; a separate process (``python -m
perfetto_graph_ann.capture.background JOB``, started with ``subprocess``: fork + exec, so
nothing of a CUDA process runs in it, and no ``__main__`` of the user's is re-run as a
multiprocessing spawn would) reads, joins and writes the output atomically, then leaves its
outcome (the join report, or the error) in the folder. :class:`ExportHandle` waits for it,
raises the same :class:`~perfetto_graph_ann.errors.GraphAnnError`, and removes the folder.

Conversions not waited for by their caller are waited for at interpreter exit, at most
:data:`EXIT_WAIT_S` seconds in all, with a message on stderr; errors found then are printed.
The worker runs in its own session (a Ctrl-C of the training stops the training, not the
conversion of a profile already taken) and removes its folder itself when its parent is gone.
Importing this module does not import torch.
"""
from __future__ import annotations

import atexit
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

__all__ = ["EXIT_WAIT_S", "ExportHandle", "NICE", "pending", "report_error", "save_for_worker", "start", "wait_all"]

#: The longest interpreter exit waits for conversions still running (seconds, all together).
EXIT_WAIT_S = 300.0
#: The worker's niceness increment: below the training it runs beside.
NICE = 10
_RESULT = "result.json"
_ERRLOG = "worker.stderr"

_lock = threading.Lock()
_pending: List["ExportHandle"] = []


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
        return self._outcome is not None or self._proc.poll() is not None

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
                self._proc.wait(timeout)
                self._outcome = self._collect()
                with _lock:
                    if self in _pending:
                        _pending.remove(self)
        ok, value = self._outcome
        if ok:
            return value
        raise value

    def _collect(self) -> tuple:
        try:
            try:
                with open(os.path.join(self._tmp, _RESULT), "rb") as f:
                    return _decode_outcome(json.loads(f.read()), self.out)
            except (OSError, ValueError, TypeError, KeyError):
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
    """Convert ``src`` (a Chrome JSON file) joined with ``annotations`` to ``out`` in a new
    process. ``tmp`` is a folder this conversion owns (beside ``out``): the annotations are
    saved there, and it is removed when the conversion's outcome is collected.

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
    from .. import settings

    env = settings.environment()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.basename(root) not in ("site-packages", "dist-packages"):  # a checkout: this very package
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open_scratch(os.path.join(tmp, _ERRLOG)) as err:
        proc = subprocess.Popen([sys.executable, "-m", "perfetto_graph_ann.capture.background", json.dumps(job)],
                                stdin=subprocess.PIPE if follow else subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, env=env,
                                start_new_session=True, close_fds=True)
    handle = ExportHandle(out, label, tmp, proc)
    with _lock:
        _pending.append(handle)
    return handle


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


def _writer_word(stream: Any) -> Callable[[float], Optional[str]]:
    """The parent's word on the worker's standard input, as :class:`~..read.follow.Followed`
    asks for it: None while torch writes, the finished trace's path, or
    :class:`~..read.follow.Abandoned` (the parent said so, or went away)."""
    import select

    from ..read.follow import Abandoned

    def finished(timeout: float) -> Optional[str]:
        if not select.select([stream], [], [], timeout)[0]:
            return None
        line = stream.readline()  # the parent writes one whole line, then closes
        doc = json.loads(line) if line.strip() else None
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
        if follow is not None:
            import numpy  # noqa: F401: the writer's plan imports it when it starts; here torch is still writing
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


def _main(argv: List[str]) -> int:
    from ..util.atomic import atomic_write_bytes

    job = json.loads(argv[0])
    if job.get("nice", True):
        try:
            os.nice(NICE)  # the training keeps its CPU: the file may appear a little later
        except (AttributeError, OSError):
            pass
    follow = None
    if job.get("follow"):
        from ..read.follow import Followed

        follow = Followed(job["follow"], _writer_word(sys.stdin.buffer))
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
    atomic_write_bytes(os.path.join(tmp, _RESULT), data)
    return 0 if outcome[0] else 2


if __name__ == "__main__":
    code = _main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # everything is written and closed: the heap of a conversion is not torn down object by object
