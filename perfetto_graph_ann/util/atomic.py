"""Atomic output files: write to a temporary file beside the target, then rename.

An exception, SIGINT or SIGTERM while writing leaves the previous file intact and no
temporary file behind. Used for every file this package writes.
"""
from __future__ import annotations

import contextlib
import errno
import gzip
import io
import os
import secrets
import signal
import threading
from typing import IO, Iterator, Optional, Sequence

from ..formats import is_gzip_name
from ..errors import OutputError, PathLike

__all__ = ["append_scratch_fd", "atomic_write", "atomic_write_bytes", "open_scratch", "refuse_input_as_output"]

_TMP_PREFIX = ".pga-tmp-"


@contextlib.contextmanager
def _sigterm_as_exception() -> Iterator[None]:
    """Turn SIGTERM into SystemExit for the duration (main thread only) so cleanup runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):  # noqa: ARG001
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, _raise)
    except ValueError:  # not the main interpreter thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def atomic_write(path: PathLike, mode: str = "wb", compress: Optional[bool] = None,
                 sigterm: bool = True, sync: bool = True) -> Iterator[IO]:
    """Open a temporary file next to ``path``; on success fsync and rename it into place.

    ``compress``: gzip the stream; ``None`` means "if the name ends in .gz". ``sigterm``: turn
    SIGTERM into ``SystemExit`` meanwhile (main thread), so that the temporary file is removed;
    off for a write inside a program that must keep its own handler (a compile record).
    ``sync`` off: no fsync (still renamed whole), for a scratch file read at once and removed
    (a background worker's outcome), where a crash leaves nothing worth keeping anyway.
    Raises :class:`OutputError` naming ``path`` for disk full, permissions, missing folder.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if compress is None:
        compress = is_gzip_name(path)
    if not os.path.isdir(directory):
        raise OutputError(path, f"output folder {directory} does not exist")
    # SIGTERM is an exception from before the temporary file exists, and SIGINT and SIGTERM are
    # held from just before its creation until the cleanup's scope is entered. Held in this
    # thread only: a signal another thread takes (numpy's threads, the program's) still raises
    # here at once, so every step from the file's creation on removes it on any exception.
    with _sigterm_as_exception() if sigterm else contextlib.nullcontext():
        held = _hold_signals()
        tmp: Optional[str] = None
        raw: Optional[IO] = None
        try:
            try:
                tmp, raw = _open_temp(directory)
            except OSError as e:
                raise OutputError(path, f"cannot create a file here: {e.strerror or e}") from e
            with _cleaned_up(raw, tmp, path):
                _release_signals(held)  # a signal held meanwhile raises here, inside the cleanup's scope
                held = None
                _apply_normal_mode(raw.fileno(), path)
                gz = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) if compress else None
                binary = gz or raw
                text = io.TextIOWrapper(binary, encoding="utf-8") if "b" not in mode else None
                yield text or binary
                if text is not None:
                    text.flush()
                    text.detach()  # closing the wrapper would close the layers below it
                if gz is not None:
                    gz.close()  # writes the gzip trailer; a GzipFile never closes its fileobj
                raw.flush()
                if sync:
                    os.fsync(raw.fileno())
                raw.close()
                os.replace(tmp, path)
        except BaseException:
            if tmp is not None and raw is not None:  # raised before the cleanup's scope took it (or after)
                _discard(raw, tmp)
            if held is not None:
                _release_signals(held)
            raise


def _open_temp(directory: str) -> "tuple[str, IO]":
    """A new temporary file in ``directory`` (owner-only, as ``mkstemp`` makes it), opened for
    writing: its name chosen first, so that whatever is raised once it exists removes it."""
    while True:
        tmp = os.path.join(directory, f"{_TMP_PREFIX}{secrets.token_hex(6)}.part")
        try:
            return tmp, _fdopen_or_remove(_create(tmp), tmp)
        except FileExistsError:
            continue
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)  # created before the exception (a signal), or never: nothing there
            raise


def _create(tmp: str) -> int:
    """Create the new file ``tmp`` (it must not exist), readable by its owner alone: its descriptor."""
    return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)


_HELD = {signal.SIGINT, signal.SIGTERM}


def _hold_signals() -> Optional[object]:
    """Hold SIGINT and SIGTERM back (main thread, POSIX): the signal mask before, else None."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)


def _release_signals(before: Optional[object]) -> None:
    """Put back the mask :func:`_hold_signals` returned: a held signal is delivered now."""
    if before is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _fdopen_or_remove(fd: int, tmp: str) -> IO:
    """``fd`` as a binary file object; where that fails, the descriptor closed and ``tmp`` removed."""
    try:
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _cleaned_up(raw: IO, tmp: str, path: str) -> Iterator[None]:
    """The temporary file closed and removed on any exception; an ``OSError`` as :class:`OutputError`."""
    try:
        yield
    except OSError as e:
        _discard(raw, tmp)
        if e.errno == errno.ENOSPC:
            raise OutputError(path, "no space left on device; the previous file (if any) is untouched") from e
        raise OutputError(path, f"write failed: {e.strerror or e}") from e
    except BaseException:
        _discard(raw, tmp)
        raise


def _apply_normal_mode(fd: int, path: str) -> None:
    """The temporary file is created 0600; give it the mode a plain open() would (or the old file's)."""
    try:
        mode = os.stat(path).st_mode & 0o7777
    except OSError:
        mode = 0o666 & ~_current_umask()
    with contextlib.suppress(OSError):
        os.fchmod(fd, mode)


def _current_umask() -> int:
    """The process umask, read without changing it where Linux allows (os.umask is racy)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def _discard(raw: IO, tmp: str) -> None:
    with contextlib.suppress(Exception):
        raw.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)


def refuse_input_as_output(output: Optional[PathLike], inputs: Sequence[Optional[PathLike]]) -> None:
    """Raise :class:`OutputError` when ``output`` is one of ``inputs`` (by name, link or hard link).

    Every output replaces its target by a rename, so an input named as the output would be
    lost once the command succeeds. Shared by the CLI and the Python entry points.
    """
    if not output or not os.path.exists(output):
        return
    for path in inputs:
        if path is None:
            continue
        try:
            same = os.path.samefile(output, path)
        except (OSError, ValueError):  # a missing or unreadable input is reported by the reader
            continue
        if same:
            raise OutputError(output, f"is also an input of this command ({os.fspath(path)}); writing the output "
                                      "there would replace it: choose another output path")


def atomic_write_bytes(path: PathLike, data: bytes, compress: Optional[bool] = None, sigterm: bool = True,
                       sync: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path, "wb", compress=compress, sigterm=sigterm, sync=sync) as f:
        f.write(data)


def append_scratch_fd(path: PathLike) -> int:
    """A descriptor appending to the scratch file ``path``, which :func:`open_scratch` made (a
    background worker's standard error, made by its parent); never creates a file."""
    return os.open(os.fspath(path), os.O_WRONLY | os.O_APPEND)


def open_scratch(path: PathLike) -> IO:
    """A new private file opened for binary writing, not an output: a scratch file in a folder
    its caller owns and removes (a background worker's stderr log). Never replaces a file."""
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    return os.fdopen(fd, "wb")
