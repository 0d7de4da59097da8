"""Running a query's ``INCLUDE PERFETTO MODULE`` statements one module at a time.

A ``graph_ann`` module can take seconds on a large trace, and a query that includes it is
one call to the trace processor. Including the modules first, each on its own and after
the ``graph_ann`` modules it depends on, lets the CLI say which module is running (see
:mod:`perfetto_graph_ann.util.progress`); the result is the same, since including a
module twice is a no-op.
"""
from __future__ import annotations

import functools
import re
from typing import List, Sequence, Tuple

from .._resources import sql_package_dir

__all__ = ["in_dependency_order", "include_modules", "split_includes"]

_INCLUDE = re.compile(r"\s*INCLUDE\s+PERFETTO\s+MODULE\s+([A-Za-z_][\w.]*)\s*;", re.I)
_COMMENT = re.compile(r"\s*--[^\n]*(\n|$)")


def split_includes(sql: str) -> Tuple[List[str], str]:
    """The modules the leading ``INCLUDE PERFETTO MODULE x;`` statements name, and the rest."""
    modules: List[str] = []
    pos = 0
    while True:
        m = _COMMENT.match(sql, pos)
        if m and m.end() > pos:
            pos = m.end()
            continue
        m = _INCLUDE.match(sql, pos)
        if not m:
            return modules, sql[pos:]
        modules.append(m.group(1))
        pos = m.end()


@functools.lru_cache(maxsize=None)
def _direct_dependencies(module: str) -> Tuple[str, ...]:
    package = sql_package_dir()
    prefix = package.name + "."
    if not module.startswith(prefix):
        return ()
    path = package / (module[len(prefix):].replace(".", "/") + ".sql")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return ()  # unknown module: the trace processor reports it
    return tuple(m.group(1) for m in re.finditer(r"^\s*INCLUDE\s+PERFETTO\s+MODULE\s+([\w.]+)\s*;", text, re.M | re.I))


def in_dependency_order(modules: Sequence[str]) -> List[str]:
    """``modules`` with the ``graph_ann`` modules they include first, each once."""
    out: List[str] = []

    def visit(m: str, path: Tuple[str, ...]) -> None:
        if m in out or m in path:
            return
        for dep in _direct_dependencies(m):
            visit(dep, path + (m,))
        out.append(m)

    for m in modules:
        visit(m, ())
    return out


def include_modules(session, modules: Sequence[str], progress=None, timeout_s=None) -> None:
    """Include ``modules`` (and their ``graph_ann`` dependencies) one by one in ``session``,
    each as a phase of ``progress`` (a :class:`~perfetto_graph_ann.util.progress.Progress`)."""
    from ..util.progress import phase

    for m in in_dependency_order(modules):
        with phase(progress, f"SQL module {m}"):
            session.query(f"INCLUDE PERFETTO MODULE {m};", timeout_s=timeout_s)
