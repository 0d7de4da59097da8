"""Typed errors. Every error a user can cause names the file and the problem.

The CLI maps :class:`GraphAnnError` subclasses to exit code 2 and prints only the
message; anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import os
from typing import Optional, Union

__all__ = ["AnnotationMismatchError", "CaptureError", "EMPTY_FILE", "EngineError", "EngineNotFoundError",
           "GraphAnnError", "IncompleteTraceError", "InputError", "LaneOptionError", "OutputError", "PathError",
           "PathLike", "QueryError", "QueryTimeoutError", "SettingError", "SidecarError", "TraceFormatError"]

PathLike = Union[str, "os.PathLike[str]"]


class GraphAnnError(Exception):
    """Base class of every error this package raises on purpose."""

    exit_code = 2

    def __reduce__(self):
        # the same error after pickling (a background conversion's, raised in its caller):
        # subclasses take other constructor arguments than their message, so rebuild by state
        return _rebuild_error, (type(self), self.args, dict(self.__dict__))


def _rebuild_error(cls: type, args: tuple, state: dict) -> GraphAnnError:
    e = cls.__new__(cls)
    e.args = args
    e.__dict__.update(state)
    return e


class PathError(GraphAnnError):
    """An error about one file: the message is ``"<path>: <problem>"``."""

    def __init__(self, path: Optional[PathLike], problem: str):
        self.path = os.fspath(path) if path is not None else None
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)


class InputError(PathError):
    """An input file is unreadable or malformed.

    The message always starts with the path, then says what is wrong and, where known,
    where in the file (event index, field).
    """


class IncompleteTraceError(InputError):
    """A trace that did not load whole: cut short (our completeness record missing or wrong,
    a gzip stream ending early) or reported by the trace processor as losing data on import.
    The message names the numbers; nothing is computed from such a trace."""


class TraceFormatError(InputError):
    """A profiler trace (Kineto / Chrome JSON) is not what torch.profiler writes."""


class SidecarError(InputError):
    """An annotation sidecar or capture record is corrupt, truncated or of an unknown version."""


class AnnotationMismatchError(InputError):
    """Annotations that do not belong to the trace they are joined with: captured by another
    process (their capture identity disagrees with the trace's), or matching none of the
    trace's graph replays. ``path`` is the annotation file, ``trace`` the trace;
    ``differences`` says what differs. ``force=True`` / ``--force-annotations`` overrides it.
    """

    def __init__(self, path: Optional[PathLike], trace: Optional[PathLike], problem: str,
                 differences: "tuple[str, ...]" = ()):
        self.trace = os.fspath(trace) if trace is not None else None
        self.differences = tuple(differences)
        super().__init__(path, problem)


class LaneOptionError(InputError, ValueError):
    """A lane option that cannot mean anything for these annotations: ``graph_lanes="all"``
    when no node is annotated (torch 2.15 raises too), a ``default_stream`` that is not a lane
    id or is a lane an annotation asks for. ``path`` names the annotation file (or the trace
    when none was given). A ``ValueError`` as well: the Python API raised that before."""


#: How every reader says a file holds nothing (trace, annotation file, trace processor input).
EMPTY_FILE = "the file is empty (0 bytes)"


class OutputError(PathError):
    """An output could not be written (disk full, permission, missing directory)."""


class SettingError(GraphAnnError, ValueError):
    """An environment variable holds a value its setting does not accept (the message names
    the variable, the value and what is accepted)."""


class CaptureError(GraphAnnError):
    """Capture-time annotation failed (unsupported backend state, bad arguments)."""


class EngineError(GraphAnnError):
    """The trace processor could not be found, started, or died."""


class EngineNotFoundError(EngineError):
    """No trace processor engine is usable; the message lists what was tried and how to fix each."""


class QueryError(EngineError):
    """A SQL query failed inside the trace processor (the engine is still alive)."""


class QueryTimeoutError(EngineError):
    """A query or trace load ran past its timeout; the engine was stopped."""
