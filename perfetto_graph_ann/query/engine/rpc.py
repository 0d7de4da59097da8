"""The trace processor RPC protocol over a Unix socket, with deadlines.

Queries go through perfetto's own :class:`TraceProcessorRpc` client. Its 0.59 release only
implements ``query()``, so this subclass adds the rest of what a session needs, in the
same framing: ``TPM_APPEND_TRACE_DATA`` / ``TPM_FINALIZE_TRACE_DATA`` (loading a trace, which
makes it a drop-in backend for a chunked loader), ``TPM_REGISTER_SQL_PACKAGE`` and
``TPM_GET_STATUS``.
"""
from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

from perfetto.trace_processor.protos import ProtoFactory
from perfetto.trace_processor.rpc import TraceProcessorRpc

__all__ = ["DeadlineTransport", "RpcBackend", "sql_package_modules"]


class DeadlineTransport:
    """Bytes over an AF_UNIX socket; reads fail with :class:`TimeoutError` past a deadline.

    Same ``send``/``read``/``close`` contract as perfetto's ``UnixTransport``: ``read(n)``
    returns exactly ``n`` bytes or raises :class:`ConnectionError`.
    """

    def __init__(self, path: str):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(path)
        except OSError:
            self._sock.close()
            raise
        self._buf = bytearray()
        self.deadline: Optional[float] = None  # time.monotonic() value, or None

    def _timeout(self) -> Optional[float]:
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("trace processor deadline passed")
        return left

    def send(self, data: bytes) -> None:
        self._sock.settimeout(self._timeout())
        self._sock.sendall(data)

    def read(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._sock.settimeout(self._timeout())
            chunk = self._sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise ConnectionError("Trace processor session closed the connection")
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def close(self) -> None:
        self._sock.close()


class RpcBackend(TraceProcessorRpc):
    """perfetto's RPC client plus trace loading, SQL package registration and status."""

    def __init__(self, transport: DeadlineTransport, protos: ProtoFactory):
        super().__init__(transport, protos)

    def _call(self, fill) -> "object":
        """Send one request (``fill`` sets its fields) and return the one reply."""
        stream = self.protos.TraceProcessorRpcStream()
        fill(stream.msg.add())
        self.transport.send(stream.SerializeToString())
        reply = self.protos.TraceProcessorRpc()
        reply.MergeFromString(self._read_payload())
        self._check_envelope(reply)
        return reply

    def parse(self, chunk: bytes):
        """Append ``chunk`` of trace data; returns an ``AppendTraceDataResult``."""

        def fill(m):
            m.request = self.protos.TraceProcessorRpc.TPM_APPEND_TRACE_DATA
            m.append_trace_data = bytes(chunk)

        return self._call(fill).append_result

    def notify_eof(self):
        """Finish loading (sorts and flushes); returns a ``FinalizeDataResult``."""

        def fill(m):
            m.request = self.protos.TraceProcessorRpc.TPM_FINALIZE_TRACE_DATA

        return self._call(fill).finalize_data_result

    def status(self):
        """The engine's ``StatusResult`` (version, loaded trace name)."""

        def fill(m):
            m.request = self.protos.TraceProcessorRpc.TPM_GET_STATUS

        return self._call(fill).status

    def register_sql_package(self, name: str, modules: Dict[str, str], allow_override: bool = False) -> str:
        """Register PerfettoSQL ``modules`` (key -> SQL) as package ``name``; '' or the error."""

        def fill(m):
            m.request = self.protos.TraceProcessorRpc.TPM_REGISTER_SQL_PACKAGE
            args = m.register_sql_package_args
            args.package_name = name
            args.allow_override = allow_override
            for key, sql in modules.items():
                mod = args.modules.add()
                mod.name = key
                mod.sql = sql

        return self._call(fill).register_sql_package_result.error


def sql_package_modules(package_dir: Path) -> Tuple[str, Dict[str, str]]:
    """Read a PerfettoSQL package folder into ``(package name, {module key: sql})``.

    Same rules as ``trace_processor_shell --add-sql-package``: the folder name is the
    package name; a module key is the package name plus the relative path with ``/`` ->
    ``.`` and ``.sql`` dropped; files with another dot in their path are skipped.
    """
    package_dir = Path(package_dir)
    name = package_dir.name
    modules: Dict[str, str] = {}
    for path in sorted(package_dir.rglob("*.sql")):
        rel = path.relative_to(package_dir).with_suffix("")
        if any("." in part for part in rel.parts):
            continue
        modules[".".join((name,) + rel.parts)] = path.read_text(encoding="utf-8")
    return name, modules
