"""Open a trace in the Perfetto UI: a one-file loopback server (``open`` subcommand)."""
from .server import ServeConfig, ServeResult, TraceServer
from .ui import PERFETTO_UI_ORIGIN, PERFETTO_UI_PORT, ServeError, find_local_ui, served_name, ui_url

__all__ = ["ServeConfig", "ServeResult", "TraceServer", "ServeError", "PERFETTO_UI_ORIGIN",
           "PERFETTO_UI_PORT", "find_local_ui", "served_name", "ui_url"]
