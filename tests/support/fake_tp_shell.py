#!/usr/bin/env python3
"""A stand-in for ``trace_processor_shell`` for tests on machines without one.

It accepts the command line the ``perfetto`` package gives a shell (``-D --http-port N
[--add-sql-package DIR]...``) and serves the shell's HTTP API (``/status``, ``/parse``,
``/notify_eof``, ``/query``) by forwarding every request to a real trace processor: the
portable WebAssembly engine, over its RPC protocol. So the native engine's own code --
start-up through ``perfetto.TraceProcessor``, ``--add-sql-package``, HTTP loading and
queries, timeouts, death -- runs against real SQL. Not a trace processor of its own.
"""
from __future__ import annotations

import argparse
import http.server
import os
import sys
import tempfile

from perfetto_graph_ann.query.engine import EngineConfig
from perfetto_graph_ann.query.engine.base import protos
from perfetto_graph_ann.query.engine.resolve import choose_engine
from perfetto_graph_ann.query.engine.portable import PortableEngine


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-D", action="store_true")
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--no-ftrace-raw", action="store_true")
    ap.add_argument("--add-sql-package", action="append", default=[])
    args, _ = ap.parse_known_args()

    choice = choose_engine(EngineConfig(engine="portable"))
    # The portable engine wants a trace path only for its messages.
    dummy = tempfile.NamedTemporaryFile(suffix=".fake-shell")
    config = EngineConfig(engine="portable", sql_packages=args.add_sql_package)
    engine = PortableEngine(dummy.name, config, choice.node, choice.bundle)
    engine.register_sql_packages()
    backend = engine._backend
    P = protos()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reply(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length", 0)))

        def do_GET(self):  # noqa: N802
            if self.path == "/status":
                self._reply(backend.status().SerializeToString())
            elif self.path == "/notify_eof":
                backend.notify_eof()
                self._reply(b"")
            else:
                self.send_error(404)

        def do_POST(self):  # noqa: N802
            if self.path == "/parse":
                self._reply(backend.parse(self._body()).SerializeToString())
            elif self.path == "/query":
                q = P.QueryArgs()
                q.ParseFromString(self._body())
                self._reply(backend.execute_query(q.sql_query).SerializeToString())
            else:
                self.send_error(404)

        def log_message(self, *a):
            pass

    server = http.server.HTTPServer(("localhost", args.http_port), Handler)
    print(f"fake shell pid {os.getpid()} on port {args.http_port}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        engine.close()


if __name__ == "__main__":
    main()
