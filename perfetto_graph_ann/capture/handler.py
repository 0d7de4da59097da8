"""``trace_handler``: a drop-in for ``torch.profiler.tensorboard_trace_handler``.

    with torch.profiler.profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=2),
            on_trace_ready=perfetto_graph_ann.trace_handler("traces")) as prof:
        for _ in range(10):
            g.replay()
            prof.step()

torch calls ``on_trace_ready`` at the end of every active span of the schedule; each call
writes that cycle's trace, joined with the annotations, as one ``.pftrace`` in ``dir_name``
(atomically: a reader never sees half a file). Names follow torch's handler:
``<worker_name>[.rank<r>].<time_ns>.pftrace`` (``.pftrace.gz`` with ``use_gzip``), with the
rank when ``torch.distributed`` is initialised, so ranks sharing a folder never clash.
Importing this module does not import torch.
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from typing import Any, Callable, List, Optional

from ..errors import OutputError
from ..pipeline.convert import write_joined_file
from .background import ExportHandle, prepare_spare, report_error, start
from .export import (AnnotationsArg, _annotations, _Follower, _scratch_beside, export_chrome_trace_to, follows,
                     keep_chrome_json)

__all__ = ["trace_handler"]


def _rank() -> Optional[int]:
    """This process's rank when torch.distributed is initialised (torch already imported), else None."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except (RuntimeError, ValueError):
        return None
    return None


#: Conversions of one handler running at once: a cycle that finds this many still running
#: waits for the oldest (so a schedule faster than its conversions cannot pile up processes).
MAX_IN_FLIGHT = 2


def trace_handler(dir_name: str, worker_name: Optional[str] = None, annotations: AnnotationsArg = None,
                  graph_lanes: Optional[str] = None, use_gzip: bool = False,
                  keep_json: bool = False, background: bool = True) -> Callable[[object], str]:
    """A ``torch.profiler`` ``on_trace_ready`` callback writing one annotated ``.pftrace``
    per profiled cycle into ``dir_name`` (created if missing).

    Args:
        dir_name: the folder of the traces.
        worker_name: defaults to ``<hostname>_<pid>`` as torch's handler.
        annotations: an :class:`~perfetto_graph_ann.annotations.model.AnnotationSet` or a
            sidecar path, or None for everything captured in this process so far (read again
            at every cycle, so graphs captured between cycles are included).
        graph_lanes: None (the default, for the ``.pftrace``'s named lanes) moves graphed
            kernels to their lanes where a node is annotated and keeps the recorded streams of
            a cycle whose annotations name nothing; ``"none"`` as in :func:`export`. ``"all"``,
            the old default, still means what it meant here (None) with a
            ``DeprecationWarning``: elsewhere ``"all"`` raises without annotated nodes, as
            torch does (``join.lanes.decide_graph_lanes``).
        use_gzip: write ``.pftrace.gz``.
        keep_json: also keep each cycle's Chrome trace as torch wrote it, beside the
            ``.pftrace`` with the same name ending in ``.json`` (``.json.gz`` with
            ``use_gzip``), written first (torch saves a cycle's trace only once).
        background: True (the default): the training loop waits only for torch's JSON
            export and the annotations saved; the read, join and write run in another process
            (:mod:`.background`) and each ``.pftrace`` appears, whole, a few seconds later
            (never a partial file). An error there is printed on stderr naming the cycle and
            the file, never raised into the loop; at most :data:`MAX_IN_FLIGHT` conversions
            run at once (a cycle waits for the oldest beyond that), and interpreter exit waits
            for those still running (bounded, with a message). False: each cycle is converted
            before the callback returns, and its errors are raised.

    Returns:
        The callback. It returns the path of the ``.pftrace`` it wrote (with ``background``:
        the path it is being written to); its ``wait()`` waits for the conversions it started
        (printing their errors) and returns the paths written.

    Raises:
        OutputError: (from the callback) the folder cannot be created; with
            ``background=False`` also what :func:`export` raises for the cycle's trace.
        InputError: (from the callback) a profile torch already saved.
    """
    dir_name = os.fspath(dir_name)
    if graph_lanes == "all":
        import warnings

        warnings.warn("trace_handler(graph_lanes='all') keeps the streams of a cycle without annotations: that is "
                      "graph_lanes=None (the default) now, and 'all' will raise there as torch does",
                      DeprecationWarning, stacklevel=2)
        graph_lanes = None
    fixed = None if annotations is None else _annotations(annotations)
    prepare_spare()  # the first cycle's conversion has a worker ready too

    def handler_fn(prof) -> str:
        import tempfile

        try:
            os.makedirs(dir_name, exist_ok=True)
        except OSError as e:
            raise OutputError(dir_name, f"cannot create the trace folder: {e.strerror or e}") from e
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        rank = _rank()
        name = f"{worker}{'' if rank is None else f'.rank{rank}'}.{time.time_ns()}.pftrace"
        out = os.path.join(dir_name, name + (".gz" if use_gzip else ""))
        # Every cycle has its own trace: export it afresh (export()'s per-profile cache would
        # hand back the first cycle's). The temporary JSON goes next to the output and is read
        # from there as any trace file is (a block at a time); keep_json keeps it first (the
        # profile's only copy, kept even if the conversion fails), renamed into place rather
        # than written again unless it is to be gzipped.
        label = f"torch.profiler trace (step {getattr(prof, 'step_num', '?')})"
        if background:
            _reap(in_flight, MAX_IN_FLIGHT - 1)
        ann = fixed if fixed is not None else _annotations(None)
        if follows(prof, out, ann):  # a worker reads the JSON while torch writes it
            handle = _cycle_following(prof, dir_name, name, out, keep_json, use_gzip, ann, graph_lanes, label,
                                      background)
            if background:
                in_flight.append(handle)
                return out
            handle.result()
            written.append(out)
            return out
        if background:
            tmp = tempfile.mkdtemp(prefix=".pga-export-", dir=dir_name)
            try:
                src = _export_to(prof, tmp, dir_name, name, out, keep_json, use_gzip)
                in_flight.append(start(src, ann, out, graph_lanes, 7, False, label, tmp))
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            return out
        with tempfile.TemporaryDirectory(prefix=".pga-export-", dir=dir_name) as tmp:
            src = _export_to(prof, tmp, dir_name, name, out, keep_json, use_gzip)
            # the join decides None (join.lanes.decide_graph_lanes)
            write_joined_file(src, out, ann, graph_lanes, label=label)
        written.append(out)
        return out

    in_flight: List[ExportHandle] = []
    written: List[str] = []

    def _reap(handles: List[ExportHandle], keep: int) -> None:
        """Collect the finished conversions (and the oldest running ones beyond ``keep``)."""
        for h in list(handles):
            if h.done() or len(handles) > keep:
                handles.remove(h)
                try:
                    h.result()
                    written.append(h.out)
                except Exception as e:  # noqa: BLE001: a cycle's error: printed, never raised into the loop
                    report_error(h, e)

    def wait() -> List[str]:
        """Wait for every conversion this handler started; their errors are printed. Returns
        the paths written so far (all cycles)."""
        _reap(in_flight, 0)
        return list(written)

    handler_fn.wait = wait  # type: ignore[attr-defined]
    return handler_fn


def _cycle_following(prof: Any, dir_name: str, name: str, out: str, keep_json: bool, use_gzip: bool, ann: Any,
                     graph_lanes: Optional[str], label: str, background: bool) -> ExportHandle:
    """A cycle's conversion by a worker started before torch writes the JSON (into a folder
    of its own in ``dir_name``), reading it as it is written (:class:`.export._Follower`):
    told the whole file once torch is done and ``keep_json`` kept. ``background``: the
    worker runs below the training (niced)."""
    follower = _Follower(out, ann, graph_lanes, 7, False, label, tmp=_scratch_beside(out), nice=background)
    try:
        src = _export_to(prof, follower.tmp, dir_name, name, out, keep_json, use_gzip, before=follower)
    except BaseException:
        follower.abandon()
        raise
    follower.handle.written(src)
    return follower.handle


def _export_to(prof: Any, tmp: str, dir_name: str, name: str, out: str, keep_json: bool, use_gzip: bool,
               before: Optional[Callable[[str], None]] = None) -> str:
    """torch's Chrome JSON of this cycle into ``tmp`` (kept beside the output too when
    ``keep_json``: renamed into place, or gzipped); the path to read it from. ``before(path)``
    is called just before torch writes it."""
    src = os.path.join(tmp, "trace.json")
    if before is not None:
        before(src)
    export_chrome_trace_to(prof, src)
    if keep_json:
        kept = keep_chrome_json(src, os.path.join(dir_name, name[:-len(".pftrace")] + ".json" +
                                                  (".gz" if use_gzip else "")), out)
        src = src if use_gzip else kept
    return src
