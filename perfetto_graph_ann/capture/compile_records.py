"""Compile records: what inductor's code generation launched for a graph (:mod:`.compiled`),
kept on disk so that the same graph loaded later from inductor's cache gets the same module
paths. Torch-free.

A graph inductor loads from its cache (a server's warm start; vLLM's compile cache) was never
generated in the process, so nothing recorded its launches. Each record keeps, per wrapper
function, the launches in order with the *module stacks of their FX origins as dynamo wrote
them* (source text relative to the compiled frame, and class name), not as paths: when the
graph is loaded again, every source text is looked up among the module stacks of the graph
dynamo has just traced, giving the module objects of this process, which are then named as a
fresh compile names them (:func:`.compiled_paths.module_stack`: the same root and depth checks).

A record is found by a hash of the generated code, of the traced graph's structure (each FX
node's name and module stack in order, :func:`graph_fingerprint`) and of the recording code
itself (another version of this package records otherwise: its records are not found).
Inductor's code names no module, so two models that differ only in which module computes what
can lower to the same code, and only the structure tells their records apart. A record that
is missing, unreadable or of another format is not used (the kernels keep the compiled
region's name); an origin whose source text the traced graph lacks is of unknown module.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .. import settings
from .compiled_paths import Item, Resolve, Stack, common_stack, module_stack

__all__ = ["FORMAT", "Launch", "Origin", "directory", "graph_fingerprint", "keys_of", "load", "origin_of",
           "record_path", "save", "stack_of"]

#: The record's ``format`` (a reader refuses any other, and any other ``version``).
FORMAT = "perfetto_graph_ann compile record"
VERSION = 1

#: An FX node's module stack as dynamo wrote it: (source text, class name) outermost first;
#: None where its ``nn_module_stack`` could not be read (the node's module is unknown).
Origin = Optional[Tuple[Tuple[str, str], ...]]


@dataclasses.dataclass(frozen=True)
class Launch:
    """One recorded launch, portable: an :class:`.compiled_paths.Item` before its origins'
    modules are named. ``origins``: the module stacks of the FX nodes it computes (None: none
    known)."""

    kind: str
    name: Optional[str]
    call: Optional[str]
    origins: Optional[Tuple[Origin, ...]]


def origin_of(meta_stack: Any) -> Origin:
    """An FX node's ``nn_module_stack`` (key -> (source text, class)) as an :data:`Origin`."""
    if not meta_stack:
        return ()
    out = []
    try:
        for value in meta_stack.values():
            raw, cls = value[0], value[1]
            name = cls if isinstance(cls, str) else getattr(cls, "__name__", None)
            if not isinstance(raw, str) or not isinstance(name, str):
                return None
            out.append((raw, name))
    except (AttributeError, TypeError, IndexError, KeyError):
        return None
    return tuple(out)


def keys_of(stacks: Iterable[Any]) -> Dict[str, str]:
    """Source text -> dynamo's key for that module, from FX nodes' ``nn_module_stack`` s."""
    keys: Dict[str, str] = {}
    for meta_stack in stacks:
        try:
            for key, value in (meta_stack or {}).items():
                if isinstance(value[0], str):
                    keys.setdefault(value[0], key)
        except (AttributeError, TypeError, IndexError, KeyError):
            continue
    return keys


def _named(origin: Origin, keys: Mapping[str, str], resolve: Resolve) -> Optional[Stack]:
    if origin is None:
        return None
    if not origin:
        return ()
    try:
        meta = {keys[raw]: (raw, name) for raw, name in origin}
    except KeyError:
        return None
    if len(meta) != len(origin):
        return None
    return module_stack(meta, resolve)


def stack_of(launch: Launch, keys: Mapping[str, str], resolve: Resolve) -> Item:
    """``launch`` as an :class:`Item`: the deepest module common to its origins (each named by
    ``resolve`` through ``keys``), and whether they all agree."""
    if not launch.origins:
        stack, exact = (), False
    else:
        stack, exact = common_stack(_named(o, keys, resolve) for o in launch.origins)
    return Item(launch.kind, launch.name, stack, exact, launch.call)


def graph_fingerprint(nodes: Iterable[Any]) -> Optional[str]:
    """A hash of a traced FX graph's structure: each node's op, name and module stack (source
    texts and class names) in order; None where a node cannot be read. Placeholders' names are
    left out: AOT autograd renames them (``p_0``, ...) while it looks the graph up in its cache."""
    h = hashlib.sha256()
    try:
        for n in nodes:
            meta = getattr(n, "meta", None) or {}
            origin = origin_of(meta.get("nn_module_stack"))
            op = n.op
            h.update(json.dumps([op, "" if op == "placeholder" else n.name, origin]).encode())
            h.update(b"\n")
    except Exception:
        return None
    return h.hexdigest()


def directory(default_cache: Any = None) -> Optional[str]:
    """Where records go (:data:`.settings.COMPILE_RECORDS`), or None when off.
    ``default_cache()``: inductor's default cache folder, asked only when the setting and
    ``TORCHINDUCTOR_CACHE_DIR`` are unset."""
    off, path = settings.path_or_off(settings.COMPILE_RECORDS)
    if off:
        return None
    if path:
        return os.path.abspath(path)
    cache = settings.text(settings.INDUCTOR_CACHE_DIR)
    if not cache and default_cache is not None:
        try:
            cache = default_cache()
        except Exception:
            return None
    return os.path.join(os.path.abspath(cache), "perfetto_graph_ann") if cache else None


#: What inductor writes into its code that says where its caches are or whether they are on,
#: not what the code launches (the H200: ``inductor_meta`` of each Triton kernel).
_CACHE_SETTINGS = re.compile(r"""['"]force_disable_caches['"]: *(?:True|False),? *""")


def record_path(folder: str, source_code: str, fingerprint: str) -> str:
    """The record of the generated code ``source_code`` lowered from a graph of ``fingerprint``.
    Not part of the key: comment lines (inductor's name the files of its cache, ``# kernel path:
    ...``, which lie elsewhere when its caches are off or moved) and the caches' switch in each
    kernel's ``inductor_meta`` (on in a warm start, off in ``run --fresh-compile``)."""
    code = "\n".join(line for line in source_code.splitlines() if not line.lstrip().startswith("#"))
    code = _CACHE_SETTINGS.sub("", code)
    h = hashlib.sha256(code.encode("utf-8", "surrogatepass"))
    h.update(b"\0" + fingerprint.encode() + b"\0" + _producer().encode())
    return os.path.join(folder, h.hexdigest() + ".json")


@functools.lru_cache(maxsize=None)
def _producer() -> str:
    """What recorded the launches: a hash of the code that decides them (this module,
    :mod:`.compiled`, :mod:`.compiled_paths`), so a record made by other recording logic (another
    version of this package) is never found; the package's version where the files cannot be read."""
    from .._version import __version__

    h = hashlib.sha256(f"{FORMAT} {VERSION} {__version__}".encode())
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        for name in ("compile_records.py", "compiled.py", "compiled_paths.py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
    except OSError:
        pass
    return h.hexdigest()


def save(path: str, backward: bool, names: Sequence[str], launches: Sequence[Tuple[int, Launch]]) -> None:
    """Write a record (atomically; the folder is made): the wrapper functions' ``names`` and
    every launch in the order inductor generated them, each with its function's index. Raises
    ``OSError`` / :class:`~perfetto_graph_ann.errors.OutputError` on failure: the caller stands back."""
    from ..util.atomic import atomic_write_bytes

    stacks: Dict[Origin, int] = {}

    def index(o: Origin) -> int:
        return -1 if o is None else stacks.setdefault(o, len(stacks))

    rows = [[fi, ln.kind, ln.name, ln.call, None if ln.origins is None else [index(o) for o in ln.origins]]
            for fi, ln in launches]
    doc = {"format": FORMAT, "version": VERSION, "backward": bool(backward), "functions": list(names),
           "stacks": [[list(f) for f in s] for s in stacks], "launches": rows}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # the program's SIGTERM handler stays its own (this runs inside its compile)
    atomic_write_bytes(path, json.dumps(doc, separators=(",", ":")).encode(), compress=False, sigterm=False)


def _str_or_none(v: Any) -> bool:
    return v is None or isinstance(v, str)


def load(path: str) -> Optional[Tuple[bool, List[str], List[Tuple[int, Launch]]]]:
    """A record as :func:`save` wrote it: ``(backward, function names, [(function index,
    launch)] in generation order)``; None where it is absent or not exactly of this format
    (never raises)."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        names = doc["functions"]
        if (doc.get("format") != FORMAT or doc.get("version") != VERSION or not isinstance(doc["backward"], bool)
                or not all(isinstance(n, str) for n in names)):
            return None
        stacks: List[Origin] = []
        for s in doc["stacks"]:
            frames = tuple((raw, name) for raw, name in s)
            if not all(isinstance(raw, str) and isinstance(name, str) for raw, name in frames):
                return None
            stacks.append(frames)
        out = []
        for fi, kind, kname, call, origins in doc["launches"]:
            if (type(fi) is not int or not 0 <= fi < len(names) or kind not in ("kernel", "extern", "other")
                    or not (_str_or_none(kname) and _str_or_none(call))):
                return None
            if origins is not None:
                if not all(type(i) is int and -1 <= i < len(stacks) for i in origins):
                    return None
                origins = tuple(None if i < 0 else stacks[i] for i in origins)
            out.append((fi, Launch(kind, kname, call, origins)))
        return doc["backward"], list(names), out
    except Exception:
        return None
