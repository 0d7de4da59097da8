"""The package's import graph follows its flow: annotations at the ground floor, capture and
the CLI at the top, nothing imports upward, and no module imports itself round a circle
(between subpackages or inside one; the C extension's translation units likewise).

Every ``import`` / ``from ... import`` in the package is read with :mod:`ast`: at module
level, inside functions and under ``if TYPE_CHECKING:`` alike (a function-level import is
still a dependency; it only runs later). Imports by string (``importlib.import_module``)
are not seen: only the top-level facade (``__getattr__``) and the CLI's own subcommand
loader use them for modules of this package.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Set, Tuple

import perfetto_graph_ann

ROOT = Path(perfetto_graph_ann.__file__).parent
PKG = "perfetto_graph_ann"

#: Layers, lowest first. A module may import its own subpackage and anything in a lower
#: layer, never a higher one or another subpackage of its own layer.
LAYERS: Tuple[Tuple[str, ...], ...] = (
    ("errors", "_version"),
    ("formats", "settings"),
    ("util", "_resources"),
    ("annotations",),
    ("read",),
    ("join",),
    ("write",),
    ("query",),
    ("pipeline", "metrics"),
    ("capture", "serve"),
    ("demo",),
    ("cli",),
    ("__main__",),
)
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}
#: What the query stage may import besides itself.
QUERY_MAY_IMPORT = {"errors", "_version", "formats", "settings", "util", "_resources"}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, root: Path = ROOT) -> List[Tuple[str, str, int]]:
    """(imported module, imported name or "", line) for every import in ``path`` (a module
    of the package at ``root``), relative imports resolved."""
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, "", node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out += [(module, a.name, node.lineno) for a in node.names]
    return out


def _subpackage(module: str) -> str:
    """``perfetto_graph_ann.join.model`` -> ``join``; the facade itself -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _edges() -> List[Tuple[str, str, str, int]]:
    """(importing subpackage, imported subpackage, file, line) across subpackages."""
    top_level = {p.stem for p in ROOT.glob("*.py")} | {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    edges = []
    for path in sorted(ROOT.rglob("*.py")):
        src = _subpackage(_module_name(path))
        if src == "":  # the facade re-exports everything; it is no layer
            continue
        for module, name, line in _imports(path):
            if module != PKG and not module.startswith(PKG + "."):
                continue
            dst = _subpackage(module)
            if dst == "":
                if name in top_level:  # `from .. import join`: the subpackage itself
                    dst = name
                else:
                    dst = "<facade>"
            if dst != src:
                edges.append((src, dst, str(path.relative_to(ROOT.parent)), line))
    return edges


EDGES = _edges()


def test_every_subpackage_has_a_layer():
    subpackages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in ROOT.glob("*.py") if p.stem != "__init__"}
    assert subpackages | modules == set(LEVEL)


def test_nothing_imports_upward_or_sideways():
    """Each import goes to a lower layer (the facade only from the top: the demo and the CLI
    drive the public API)."""
    bad = []
    for src, dst, where, line in EDGES:
        if dst == "<facade>":
            if LEVEL[src] < LEVEL["demo"]:
                bad.append(f"{where}:{line}: {src} imports the top-level facade")
        elif LEVEL[dst] >= LEVEL[src]:
            bad.append(f"{where}:{line}: {src} (layer {LEVEL[src]}) imports {dst} (layer {LEVEL[dst]})")
    assert not bad, "\n".join(bad)


def test_no_cycles_between_subpackages():
    graph: Dict[str, Set[str]] = {}
    for src, dst, _, _ in EDGES:
        graph.setdefault(src, set()).add(dst)
    state: Dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: List[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def _module_graph(root: Path = ROOT) -> Dict[str, Set[str]]:
    """module -> the modules of the package at ``root`` it imports (any level, any place in
    the file). ``from . import x`` goes to the module ``x`` where there is one, else to the
    package's ``__init__``."""
    pkg = root.name
    modules = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        for module, attr, _ in _imports(path, root):
            if module != pkg and not module.startswith(pkg + "."):
                continue
            target = f"{module}.{attr}" if attr and f"{module}.{attr}" in modules else module
            if target != name:
                graph.setdefault(name, set()).add(target)
    return graph


def _circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Every strongly connected set of more than one node (Tarjan), each sorted: an import
    circle, however long."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_circles_between_modules():
    """Inside a subpackage too: a module never reaches itself through imports (module level,
    function level and ``TYPE_CHECKING`` alike), e.g. writer -> emit -> writer."""
    circles = _circles(_module_graph())
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_check_sees_a_function_level_circle(tmp_path):
    """The check itself fails where it should: a circle closed by an import inside a function."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .a import f\n")
    (pkg / "sub" / "a.py").write_text("from .b import g\n\ndef f():\n    return g()\n")
    (pkg / "sub" / "b.py").write_text("def g():\n    from . import c\n    return c.h()\n")
    (pkg / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n")
    assert _circles(_module_graph(pkg)) == [["pkg.sub.a", "pkg.sub.b", "pkg.sub.c"]]
    (pkg / "sub" / "c.py").write_text("def h():\n    return 1\n")
    assert _circles(_module_graph(pkg)) == []


#: The C extension's translation units (they share ``_fastpath.h``).
C_UNITS = sorted((ROOT / "capture").glob("_*.c"))


def _c_graph(units: List[Path]) -> Dict[str, Set[str]]:
    """unit -> the units whose non-static functions it calls (a function is defined where a
    line starts with its name and an open parenthesis, in C's usual two-line style; Python's
    macros at a line's start, ``PyDoc_STRVAR(...)``, define nothing)."""
    texts = {p.name: p.read_text(encoding="utf-8") for p in units}
    owner = {}
    for unit, text in texts.items():
        for name in re.findall(r"^([A-Za-z_]\w*)\(", text, re.M):
            if name == "PyDoc_STRVAR":
                continue
            if not re.search(rf"^static\b[^;{{]*\n{name}\(", text, re.M):
                owner[name] = unit
    graph: Dict[str, Set[str]] = {}
    for unit, text in texts.items():
        code = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
        for name, defined_in in owner.items():
            if defined_in != unit and re.search(rf"\b{name}\s*\(", code):
                graph.setdefault(unit, set()).add(defined_in)
    return graph


def test_no_circles_between_the_extensions_c_units():
    assert len(C_UNITS) >= 3
    circles = _circles(_c_graph(C_UNITS))
    assert not circles, f"C translation units calling each other round: {circles}"


def test_the_c_check_sees_a_circle(tmp_path):
    a, b = tmp_path / "_a.c", tmp_path / "_b.c"
    a.write_text("int\nfa(void)\n{\n    return fb();\n}\n")
    b.write_text("static int\nlocal(void)\n{\n    return 0;\n}\n\nint\nfb(void)\n{\n    return fa() + local();\n}\n")
    assert _circles(_c_graph([a, b])) == [["_a.c", "_b.c"]]
    b.write_text("int\nfb(void)\n{\n    return 0;\n}\n")
    assert _circles(_c_graph([a, b])) == []


def test_read_join_write_query_never_import_capture():
    """The acceptance check of the structure (``grep -rn "from \\.\\.capture" ...`` is empty)."""
    bad = [f"{where}:{line}" for src, dst, where, line in EDGES
           if dst == "capture" and src in ("read", "join", "write", "query")]
    assert not bad
    pattern = re.compile(r"from \.\.capture|from perfetto_graph_ann\.capture")
    for stage in ("read", "join", "write", "query"):
        for path in sorted((ROOT / stage).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            assert not pattern.search(text), f"{path} names capture in an import"


def test_annotations_are_the_ground_floor():
    bad = [f"{where}:{line}: {dst}" for src, dst, where, line in EDGES
           if src == "annotations" and dst not in ("errors", "_version", "formats", "settings", "util")]
    assert not bad


def test_query_depends_on_no_other_stage():
    bad = [f"{where}:{line}: {dst}" for src, dst, where, line in EDGES
           if src == "query" and dst not in QUERY_MAY_IMPORT]
    assert not bad, bad


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    """The parser itself: a function-level relative import two levels up is resolved."""
    sub = tmp_path / "pkg" / "sub"
    sub.mkdir(parents=True)
    f = sub / "mod.py"
    f.write_text("def f():\n    from ..other.x import y\n\nfrom . import sibling\n")
    got = sorted(_imports(f, tmp_path / "pkg"))
    assert got == [("pkg.other.x", "y", 2), ("pkg.sub", "sibling", 4)]


def test_type_checking_imports_match_the_lazy_table():
    """The facade's ``if TYPE_CHECKING:`` block names every public name from the module
    ``__getattr__`` loads it from, so what IDEs see is what runs."""
    tree = ast.parse((ROOT / "__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING")
    seen = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1
        for a in node.names:
            # `from . import metrics`: the module itself, (module, None) in the table
            seen[a.asname or a.name] = (node.module, a.name) if node.module else (a.name, None)
    want = {name: (t if isinstance(t, tuple) else (t, name)) for name, t in perfetto_graph_ann._LAZY.items()}
    assert seen == want
