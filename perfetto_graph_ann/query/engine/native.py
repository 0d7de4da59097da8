"""The native engine: a local ``trace_processor_shell`` started by the ``perfetto`` package.

``perfetto.TraceProcessor`` starts the shell (its own process group) and talks HTTP to it;
our SQL packages go in as ``TraceProcessorConfig(add_sql_packages=[dir])``, i.e.
``--add-sql-package DIR`` (a plain folder named like the package, which v52 shells and
newer all accept; ``DIR@NAME`` needs v54+). Loading uses the same chunked loader as the
portable engine, through the backend's ``parse``/``notify_eof``.
"""
from __future__ import annotations

import contextlib
import math
import os
import urllib.request
from pathlib import Path
from typing import Iterator, Optional

from perfetto.common.exceptions import PerfettoException
from perfetto.trace_processor.api import TraceProcessor, TraceProcessorConfig

from ...errors import EngineError
from . import process
from .base import Engine
from .config import EngineConfig

__all__ = ["NativeEngine", "removing_status_downloads", "tp_config"]


def tp_config(config: EngineConfig, shell: str) -> TraceProcessorConfig:
    """The ``perfetto`` package's config for ``shell`` with our SQL packages (also used by
    :func:`~perfetto_graph_ann.query.batch.query_many`'s BatchTraceProcessor)."""
    return TraceProcessorConfig(
        bin_path=shell,
        add_sql_packages=[str(d) for d in config.package_dirs()],
        load_timeout=max(1, math.ceil(config.start_timeout_s)),
        verbose=config.verbose,
    )


@contextlib.contextmanager
def removing_status_downloads() -> Iterator[None]:
    """Remove the temporary files the ``perfetto`` package's start-up leaves behind.

    It polls the shell's ``/status`` with ``urllib.request.urlretrieve`` and no file name,
    which keeps every reply in a temporary file until ``urlcleanup()``; calling that would
    also reset an opener the user installed, so only the files added meanwhile go.
    """
    registry = getattr(urllib.request, "_url_tempfiles", None)
    before = len(registry) if isinstance(registry, list) else 0
    try:
        yield
    finally:
        if isinstance(registry, list):
            for path in registry[before:]:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            del registry[before:]


class NativeEngine(Engine):
    """One ``trace_processor_shell`` process, one trace loaded."""

    kind = "native"

    def __init__(self, trace_path: Path, config: EngineConfig, shell: str):
        super().__init__(trace_path, config)
        self.shell = shell
        try:
            with removing_status_downloads():
                self.tp: Optional[TraceProcessor] = TraceProcessor(config=tp_config(config, shell))
        except (PerfettoException, OSError) as e:
            raise EngineError(f"{trace_path}: the native trace processor {shell} failed to start: {e}") from e
        proc = self.tp.subprocess
        if proc is not None:
            process.track(proc)
        # perfetto's HTTP backend (``tp.http`` is its public alias of the backend).
        self._backend = self.tp.http
        with self._guard("start-up", config.start_timeout_s):
            self.version = self._backend.status().human_readable_version

    @property
    def pid(self) -> Optional[int]:
        proc = self.tp.subprocess if self.tp is not None else None
        return proc.pid if proc is not None and proc.poll() is None else None

    def _returncode(self) -> Optional[int]:
        proc = self.tp.subprocess if self.tp is not None else None
        return proc.poll() if proc is not None else -9

    def _stderr_tail(self) -> str:
        from .base import read_tail

        return read_tail(getattr(self.tp.http, "_tp_stderr", None)) if self.tp is not None else ""

    def _set_deadline(self, deadline: Optional[float]) -> None:
        import time

        conn = self._backend.conn
        timeout = None if deadline is None else max(0.001, deadline - time.monotonic())
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)

    def _kill(self) -> None:
        tp, self.tp = self.tp, None
        if tp is None:
            return
        proc = tp.subprocess
        tp.close()  # kills the shell's process tree and closes its temp files
        process.kill(proc)
