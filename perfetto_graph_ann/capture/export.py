"""One call from a live ``torch.profiler.profile`` to an annotated trace file.

    with torch.profiler.profile(...) as prof:
        g.replay()
    perfetto_graph_ann.export(prof, "run.pftrace")          # or "run.json.gz"
    perfetto_graph_ann.export("saved.json", "run.pftrace")  # a trace saved earlier

The profiler writes its Chrome trace to a temporary file (``export_chrome_trace``, the
only profiler method used, so any object with it works; torch saves a trace only once,
so the bytes are kept on the profiler for later calls); the trace is joined with the
live annotation registry (or the given annotations) and written as native Perfetto
(``.pftrace``) or annotated Chrome JSON (``.json`` / ``.json.gz``). Reading, joining and
writing are :func:`perfetto_graph_ann.pipeline.convert.write_joined`'s. Importing this
module does not import torch.
"""
from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from ..annotations.model import AnnotationSet
from ..errors import InputError, OutputError, PathLike
from ..join.model import LaneLayout
from ..pipeline.convert import write_joined_file
from ..util.atomic import atomic_write_bytes

if TYPE_CHECKING:
    from .background import ExportHandle

__all__ = ["AnnotationsArg", "chrome_trace_bytes", "expected_kernels", "export", "export_chrome_trace_bytes", "follows"]

AnnotationsArg = Union[AnnotationSet, PathLike, None]

def _annotations(annotations: AnnotationsArg) -> AnnotationSet:
    if annotations is None:  # ours, or torch's own registry on torch's backend
        from .recorded import recorded_annotations

        return recorded_annotations()
    if isinstance(annotations, AnnotationSet):
        return annotations
    from ..annotations.files import load_annotations

    return load_annotations(annotations)


#: Attribute on the profiler object holding its Chrome trace once exported: a :class:`_Kept`
#: file, or the bytes where the object takes no weak reference.
_CACHE_ATTR = "_pga_chrome_trace"


class _Kept:
    """A profile's Chrome JSON in a private temporary folder, removed when the profiler object
    is collected (or at interpreter exit): kept on disk, not as bytes in the caller's memory."""

    __slots__ = ("path", "finalizer")

    def __init__(self, path: str, finalizer: "weakref.finalize") -> None:
        self.path, self.finalizer = path, finalizer


def _kept_trace(prof, before: "Optional[Callable[[str], None]]" = None) -> "tuple[Union[str, bytes], Optional[str]]":
    """``prof``'s Chrome JSON, torch's export run once for the profile (torch saves a trace
    only once): (the path of a file kept while ``prof`` lives, or its bytes where ``prof``
    takes no weak reference; a folder the caller removes when done, where nothing could be
    kept on ``prof``, else None). ``before(path)`` is called just before torch writes to
    ``path`` (not at all when the trace was kept by an earlier call)."""
    import shutil
    import weakref

    kept = getattr(prof, _CACHE_ATTR, None)
    if type(kept) is _Kept:
        if not os.path.isfile(kept.path):
            raise InputError(None, f"this profile's Chrome trace, kept at {kept.path} by an earlier export, is "
                                   "gone (removed by something else) and torch saves a trace only once: profile "
                                   "again, or keep it with export(..., keep_json=PATH) next time")
        return kept.path, None
    if type(kept) is bytes:
        return kept, None
    tmp = tempfile.mkdtemp(prefix=".pga-profile-")
    path = os.path.join(tmp, "trace.json")
    try:
        if before is not None:
            before(path)
        export_chrome_trace_to(prof, path)
        try:
            finalizer = weakref.finalize(prof, shutil.rmtree, tmp, True)
        except TypeError:  # no weak reference: its bytes, kept on it where it takes attributes
            with open(path, "rb") as f:
                data = f.read()
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                setattr(prof, _CACHE_ATTR, data)
            except AttributeError:
                pass
            return data, None
        try:
            setattr(prof, _CACHE_ATTR, _Kept(path, finalizer))
        except AttributeError:  # takes no new attributes: the file is the caller's, this once
            finalizer.detach()
            return path, tmp
        return path, None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def chrome_trace_bytes(prof) -> bytes:
    """The profiler's own Chrome trace (JSON bytes), exported once for the profile.

    torch.profiler saves a trace only once (a second ``export_chrome_trace`` raises
    "Trace is already saved"), so every :func:`export` of the same profile, and callers
    who want the raw trace too, share this one copy: a file kept while ``prof`` lives
    (:func:`_kept_trace`), read here.
    """
    import shutil

    kept, own = _kept_trace(prof)
    if type(kept) is bytes:
        return kept
    try:
        with open(kept, "rb") as f:
            return f.read()
    finally:
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)


def export_chrome_trace_bytes(prof, tmp_dir: Optional[str] = None) -> bytes:
    """``prof.export_chrome_trace`` to a temporary file (in ``tmp_dir``, else the system's
    temporary folder; removed afterwards), returned as bytes. Not cached: a profiler with a
    schedule has a new trace in every cycle (see :mod:`.handler`)."""
    with tempfile.TemporaryDirectory(prefix=".pga-export-", dir=tmp_dir) as tmp:
        src = os.path.join(tmp, "trace.json")
        export_chrome_trace_to(prof, src)
        with open(src, "rb") as f:
            return f.read()


def export_chrome_trace_to(prof, path: str) -> None:
    """``prof.export_chrome_trace(path)``; a profile torch already saved is an
    :class:`~perfetto_graph_ann.errors.InputError` that says what to do instead."""
    try:
        prof.export_chrome_trace(path)
    except RuntimeError as e:
        if "already saved" in str(e):
            raise InputError(None, "this torch.profiler profile was already saved with export_chrome_trace "
                                   "(torch saves a trace only once): call perfetto_graph_ann.export first, or "
                                   "convert the saved JSON with `perfetto-graph-ann convert`") from e
        raise


def export(prof, out: PathLike, annotations: AnnotationsArg = None, graph_lanes: str = "none",
           default_stream: int = 7, force: bool = False, keep_json: Optional[PathLike] = None,
           background: bool = False) -> "Union[LaneLayout, ExportHandle]":
    """Write ``prof``'s trace to ``out`` with semantic lanes and annotation args.

    May be called several times on one profile (e.g. once per format): the profiler's trace
    is exported once and reused. Joined by :func:`~perfetto_graph_ann.pipeline.joined.read_and_join`.

    Args:
        prof: a live ``torch.profiler.profile`` (anything with ``export_chrome_trace``), or
            the path of a trace it saved (``.json`` / ``.json.gz``).
        out: ``.json`` / ``.json.gz`` gives annotated Chrome JSON as torch 2.15's exporter
            writes it, anything else a ``.pftrace``; written atomically.
        annotations: an :class:`AnnotationSet`, a sidecar / capture-record path, or None for
            everything captured so far in this process.
        graph_lanes: as in torch 2.15's ``export_chrome_trace``: ``"none"`` (default) keeps
            the recorded streams, ``"all"`` moves graphed events to their annotated lanes.
        default_stream: the lane of graphed events without one under ``"all"``.
        force: join annotations that do not belong to the profile (the report then says
            what was overridden).
        keep_json: also keep the profiler's own Chrome trace, as torch wrote it, at this
            path (gzipped for a ``.gz`` name), written atomically before ``out``: torch saves
            a profile only once, so this is the way to have both without exporting twice.
            Only for a live profiler (a saved trace is already kept).
        background: return once torch's JSON is exported and the annotations saved (both
            into a temporary folder beside ``out``); reading, joining and writing run in
            another process (:mod:`.background`), and ``out`` appears, whole, when it is done.

    A live profile to a ``.pftrace`` is read while torch writes it, by another process (torch
    holds this one meanwhile; see :func:`follows`): at any size where a worker started ahead is
    ready, else from ``PERFETTO_GRAPH_ANN_EXPORT_FOLLOW`` (40,000) graphed kernels by the replay
    record; blocking, this process joins the finished file for the layout it returns, and the
    two reports must agree. After the export one worker is started ahead for the next
    (``PERFETTO_GRAPH_ANN_EXPORT_SPARE``; :func:`.background.prepare_spare`).

    Returns:
        The join's :class:`LaneLayout` (its report: ``layout.report``); with ``background``,
        an :class:`~.background.ExportHandle`: ``result()`` waits and returns the report
        (or raises what the blocking call raises), ``done()`` says whether it has finished.

    Raises:
        LaneOptionError: ``"all"`` when no node is annotated (a ``ValueError``, as torch's).
        AnnotationMismatchError: annotations that do not belong to the profile (another
            process's sidecar, or ones that match none of its graph replays); nothing is
            written, unless ``force``.
        InputError: a profile torch already saved (it saves a trace only once).
    """
    out = _checked_output(out)
    ann = _annotations(annotations)
    if background:
        return _export_background(prof, out, ann, graph_lanes, default_stream, force, keep_json)
    if isinstance(prof, (str, bytes, os.PathLike)):
        from ..util.atomic import refuse_input_as_output

        if keep_json is not None:
            raise ValueError("keep_json applies to a live profiler: the trace given is already saved")
        src = os.fsdecode(prof)
        refuse_input_as_output(out, [src])
        return write_joined_file(src, out, ann, graph_lanes, default_stream, force)
    try:
        if follows(prof, out, ann):
            layout = _export_following(prof, out, ann, graph_lanes, default_stream, force, keep_json)
            if layout is not None:
                return layout
        with tempfile.TemporaryDirectory(prefix=".pga-export-") as tmp:
            src = _profile_json(prof, os.path.join(tmp, "trace.json"), keep_json, out, link=False)
            return write_joined_file(src, out, ann, graph_lanes, default_stream, force, "torch.profiler trace")
    finally:
        _spare_for_next()


def _spare_for_next() -> None:
    """After exporting a live profile: a worker started ahead for the next export of this process
    (:func:`.background.prepare_spare`), so that it can read torch's JSON as torch writes it."""
    from .background import prepare_spare

    prepare_spare()


def _profile_json(prof, dst: str, keep_json: Optional[PathLike], out: str, link: bool) -> str:
    """The path of ``prof``'s Chrome JSON for one conversion: the kept file itself
    (:func:`_kept_trace`), or with ``link`` (a background worker, which may outlive the
    profiler object) ``dst`` hard-linked or copied from it; the bytes written to ``dst`` where
    they were kept as bytes. ``keep_json`` is kept first, a copy (the profile's only copy
    stays even if the conversion fails)."""
    import shutil

    kept, own = _kept_trace(prof)
    try:
        if keep_json is not None:
            keep_chrome_json(kept, keep_json, out, move=False)
        if type(kept) is bytes:
            atomic_write_bytes(dst, kept)
            return dst
        if not link and own is None:
            return kept
        try:
            os.link(kept, dst)
        except OSError:  # another file system, or no hard links there
            shutil.copyfile(kept, dst)
        return dst
    finally:
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)



def expected_kernels(ann: AnnotationSet) -> int:
    """The graphed kernels the latest profiler window's replays launched, by the replay record
    (each replay of an annotated graph: its nodes); 0 where nothing was recorded."""
    window = ann.latest_window()
    if window is None:
        return 0
    nodes = {g.exec_id: len(g.nodes) for g in ann.graphs}
    return sum(nodes.get(e, 0) for t in window.threads for e in t.graphs)


def follows(prof: Any, out: str, ann: AnnotationSet) -> bool:
    """Whether ``prof``'s trace to ``out`` is read while torch writes it, by a worker process
    (:class:`_Follower`): a live profiler taking weak references (its JSON kept on it), a
    ``.pftrace`` output, a Python executable to start, and at least
    ``PERFETTO_GRAPH_ANN_EXPORT_FOLLOW`` graphed kernels in the replay record (below it a new
    worker's start costs more than it saves); with the setting unset, any number where a spare
    worker is ready (:func:`.background.has_spare`)."""
    import sys
    import weakref

    from .. import settings
    from ..formats import is_json_name
    from .background import has_spare

    if isinstance(prof, (str, bytes, os.PathLike)) or is_json_name(out) or not sys.executable or os.name != "posix":
        return False  # (the worker waits for the word on a pipe with select: POSIX only)
    if type(getattr(prof, _CACHE_ATTR, None)) in (_Kept, bytes):  # exported already: nothing to follow
        return False
    least = settings.count_or_off(settings.EXPORT_FOLLOW)
    if least is None:
        return False
    if expected_kernels(ann) < least and not (settings.raw(settings.EXPORT_FOLLOW)[1] is None and has_spare(True)):
        return False  # (unset, with a worker started ahead and ready: its start costs nothing now)
    try:
        weakref.ref(prof)
    except TypeError:
        return False
    return True


class _Follower:
    """The ``before`` of :func:`_kept_trace`: starts, just before torch's export writes the
    profile's JSON, a worker (:func:`.background.start` with ``follow``) that reads it as it
    is written and converts it to ``out``, in ``tmp`` (made beside ``out`` when None).
    ``nice``: as :func:`.background.start`'s."""

    def __init__(self, out: str, ann: AnnotationSet, graph_lanes: Optional[str], default_stream: int, force: bool,
                 label: str, tmp: Optional[str] = None, nice: bool = True) -> None:
        self.args = (ann, out, graph_lanes, default_stream, force, label)
        self.tmp, self.nice = tmp, nice
        self.handle: "Optional[ExportHandle]" = None

    def __call__(self, path: str) -> None:
        from .background import start

        ann, out, graph_lanes, default_stream, force, label = self.args
        if self.tmp is None:
            self.tmp = _scratch_beside(out)
        self.handle = start(path, ann, out, graph_lanes, default_stream, force, label, self.tmp, follow=True,
                            nice=self.nice)

    def abandon(self) -> None:
        """torch's export failed (or what came after it): the worker ends, its folder goes."""
        import shutil

        if self.handle is not None:
            self.handle.abandon()
        elif self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _scratch_beside(out: str) -> str:
    try:
        return tempfile.mkdtemp(prefix=".pga-export-", dir=os.path.dirname(os.path.abspath(out)))
    except OSError as e:
        raise OutputError(out, f"cannot write beside the output: {e.strerror or e}") from e


def _export_following(prof, out: str, ann: AnnotationSet, graph_lanes: str, default_stream: int, force: bool,
                      keep_json: Optional[PathLike]) -> "Optional[LaneLayout]":
    """The blocking :func:`export` with a :class:`_Follower`: while the worker reads torch's
    JSON and writes ``out``, this process joins the finished file for the layout it returns
    (the same join: its report must equal the worker's, or nothing is kept). None when the
    profile was exported before (nothing to follow: the caller converts the kept file)."""
    import shutil

    label = "torch.profiler trace"
    follower = _Follower(out, ann, graph_lanes, default_stream, force, label, nice=False)
    kept, own = _followed_trace(prof, follower, keep_json, out)
    if follower.handle is None:
        return None
    handle = follower.handle
    try:
        handle.written(kept)
        from ..pipeline.convert import join_for_output

        try:
            layout = join_for_output(kept, out, ann, graph_lanes, default_stream, force, label)
        except Exception:
            _settle(handle, out)
            raise
        _spare_for_next()  # while the worker still writes (its start off the caller's wait); again, a no-op, at the end
        report = handle.result()  # the worker's error: the same join refused, nothing written
        if report.as_dict() != layout.report.as_dict():
            _remove(out)
            raise OutputError(out, "the conversion and this process's join of the same profile disagree, so "
                                   "nothing was kept: please report it; PERFETTO_GRAPH_ANN_EXPORT_FOLLOW=off "
                                   "converts in this process")
        return layout
    except BaseException as e:
        if not isinstance(e, Exception):  # interrupted (Ctrl-C) joining or waiting: the worker is stopped too
            handle.stop()
        raise
    finally:
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)


def _followed_trace(prof, follower: _Follower, keep_json: Optional[PathLike],
                    out: str) -> "tuple[Union[str, bytes], Optional[str]]":
    """:func:`_kept_trace` with ``follower`` started before torch writes, and ``keep_json``
    kept (before the worker is told the file is whole: kept first, as without a worker). On
    an error the worker is abandoned (nothing is written) and the error raised."""
    import shutil

    own = None
    try:
        kept, own = _kept_trace(prof, before=follower)
        if follower.handle is not None and keep_json is not None:
            keep_chrome_json(kept, keep_json, out, move=False)
    except BaseException:
        follower.abandon()
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)
        raise
    return kept, own  # no worker: the trace was kept by an earlier call, so no folder of the caller's either


def _settle(handle: "ExportHandle", out: str) -> None:
    """After an error of this process's, once the worker was told the file is whole: wait for
    it (its output is written atomically, never cut short) and remove what it wrote."""
    try:
        handle.result()
    except Exception:  # noqa: BLE001: this process's error is the one raised
        pass
    finally:
        _remove(out)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _export_background(prof, out: str, ann: AnnotationSet, graph_lanes: str, default_stream: int, force: bool,
                       keep_json: Optional[PathLike]) -> "ExportHandle":
    """:func:`export`'s ``background``: what the caller waits for is torch's export (once per
    profile, as always) and the annotations saved; lane options are checked here first, so
    they raise at once as in the blocking call."""
    from ..join.lanes import check_default_stream, decide_graph_lanes
    from .background import start

    saved = isinstance(prof, (str, bytes, os.PathLike))
    label = os.fsdecode(prof) if saved else "torch.profiler trace"
    files = [ann.source] if ann.source else None
    decide_graph_lanes(graph_lanes, ann, files, label)
    check_default_stream(default_stream, ann, files, label)
    follow = not saved and follows(prof, out, ann)
    tmp = _scratch_beside(out)
    if follow:
        handle = _background_following(prof, out, ann, graph_lanes, default_stream, force, keep_json, label, tmp)
        if handle is not None:
            return handle
    try:
        if saved:
            from ..util.atomic import refuse_input_as_output

            if keep_json is not None:
                raise ValueError("keep_json applies to a live profiler: the trace given is already saved")
            src = label
            refuse_input_as_output(out, [src])
        else:  # the worker reads its own link or copy: it may outlive the profiler object
            src = _profile_json(prof, os.path.join(tmp, "trace.json"), keep_json, out, link=True)
        return start(src, ann, out, graph_lanes, default_stream, force, label, tmp)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _background_following(prof, out: str, ann: AnnotationSet, graph_lanes: str, default_stream: int, force: bool,
                          keep_json: Optional[PathLike], label: str, tmp: str) -> "Optional[ExportHandle]":
    """:func:`_export_background` with a :class:`_Follower` (the worker reads torch's JSON as
    it is written); once torch is done, the worker is told the whole file's link in ``tmp``
    (it may outlive the profiler object). None when the profile was exported before."""
    import shutil

    follower = _Follower(out, ann, graph_lanes, default_stream, force, label, tmp=tmp)
    kept, own = _followed_trace(prof, follower, keep_json, out)
    if follower.handle is None:
        return None
    try:
        link = os.path.join(tmp, "trace.json")
        try:
            os.link(kept, link)
        except OSError:  # another file system, or no hard links there: the worker reads the copy again
            shutil.copyfile(kept, link)
    except BaseException:
        follower.abandon()
        raise
    finally:
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)
    follower.handle.written(link)
    return follower.handle


def keep_chrome_json(data: "bytes | str", path: PathLike, out: PathLike, move: bool = True) -> str:
    """Keep the profiler's Chrome trace at ``path`` (gzipped for a ``.gz`` name), atomically:
    ``data`` its bytes, or the temporary file torch wrote them to, on the same file system
    (with ``move``, renamed into place when no gzip is asked: no copy; else copied, the file
    left where it is). ``path`` must not be ``out``. Returns the path."""
    from ..formats import is_gzip_name, is_json_name
    from ..util.atomic import atomic_write_bytes

    path = _checked_output(path)
    if os.path.abspath(path) == os.path.abspath(os.fspath(out)):
        raise OutputError(path, "keep_json names the output itself: give the raw Chrome trace its own name")
    if not is_json_name(path):
        raise OutputError(path, "keep_json is a Chrome JSON trace: give it a .json or .json.gz name")
    if isinstance(data, str):
        if not is_gzip_name(path) and move:
            try:
                os.replace(data, path)
                return path
            except OSError as e:
                raise OutputError(path, f"cannot keep the Chrome trace here: {e.strerror or e}") from e
        with open(data, "rb") as f:
            data = f.read()
    atomic_write_bytes(path, data)
    return path


def _checked_output(out: PathLike) -> str:
    out = os.fspath(out)
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise OutputError(out, f"output folder {folder} does not exist")
    return out
