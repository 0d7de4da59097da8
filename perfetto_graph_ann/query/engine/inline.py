"""Self-contained SQL: replace ``INCLUDE PERFETTO MODULE <our package>.<module>;`` with the
module's text, dependencies first, each module once.

For trace processors where we cannot register a SQL package -- Perfetto's Bigtrace
service (an orchestrator fanning one query out to many trace processor workers, whose
command lines we do not control), or any ``--remote`` instance started by someone else --
the inlined query runs unchanged. Includes of other packages (Perfetto's stdlib) are kept.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set

from ...errors import QueryError
from .rpc import sql_package_modules

__all__ = ["inline_sql"]

_INCLUDE = re.compile(r"^[ \t]*INCLUDE[ \t]+PERFETTO[ \t]+MODULE[ \t]+([A-Za-z0-9_.]+)[ \t]*;[ \t]*$", re.IGNORECASE | re.MULTILINE)


def inline_sql(sql: str, package_dirs: Optional[Sequence[Path]] = None) -> str:
    """``sql`` with every include of a module from ``package_dirs`` (default: graph_ann) inlined."""
    if package_dirs is None:
        from ..._resources import sql_package_dir

        package_dirs = [sql_package_dir()]
    modules: Dict[str, str] = {}
    packages: Set[str] = set()
    for d in package_dirs:
        name, mods = sql_package_modules(Path(d))
        packages.add(name)
        modules.update(mods)
    done: Set[str] = set()

    def expand(text: str, stack: List[str]) -> str:
        def repl(m: "re.Match[str]") -> str:
            key = m.group(1)
            if key.split(".", 1)[0] not in packages:
                return m.group(0)
            if key in stack:
                raise QueryError(f"{key}: modules include each other: {' -> '.join(stack + [key])}")
            if key in done:
                return f"-- (module {key} already inlined above)"
            if key not in modules:
                raise QueryError(f"{key}: no such module in package(s) {', '.join(sorted(packages))}")
            body = expand(modules[key], stack + [key])
            done.add(key)
            return f"-- >>> module {key}\n{body.strip()}\n-- <<< module {key}"

        return _INCLUDE.sub(repl, text)

    return expand(sql, [])
