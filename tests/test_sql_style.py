"""Static checks of sql/graph_ann: the stdlib's documentation style and the v52 traps.

Trace processor v52 lacks the ``ANY`` type and ``DELEGATES TO``, and later releases removed
``slice.stack_id``; ``__intrinsic`` objects are
private to the trace processor. These are text checks; that the modules actually run on
v52 is what test_sql_metrics.py checks on the portable engine.
"""
from __future__ import annotations

import re

import pytest

from perfetto_graph_ann._resources import sql_package_dir

SQL_DIR = sql_package_dir()
MODULES = sorted(p.name[:-4] for p in SQL_DIR.glob("*.sql"))
#: The modules that define public (``graph_ann_*``) objects; the others are private helpers.
PUBLIC = {"collectives", "critical_path", "diff", "gpu_work", "groups", "lane_idle", "lanes", "modules", "overlap", "replays", "scope_stats",
          "scopes"}
REPO = SQL_DIR.parents[1] if (SQL_DIR.parents[1] / "docs").is_dir() else None

_CREATE = re.compile(r"^CREATE PERFETTO (TABLE|VIEW|FUNCTION|MACRO|INDEX) (\w+)\s*\(", re.M)
_VIRTUAL = re.compile(r"^CREATE VIRTUAL TABLE (\w+)", re.M)


def _text(module: str) -> str:
    return (SQL_DIR / f"{module}.sql").read_text()


def test_public_modules_exist():
    assert all("." not in m for m in MODULES)  # a second dot would make the module unloadable
    public = {m for m in MODULES if any(n.startswith("graph_ann_") for _, n in _CREATE.findall(_text(m)))}
    assert public == PUBLIC


@pytest.mark.parametrize("module", MODULES)
def test_header_is_one_or_two_lines(module):
    """The license, then a summary of one or two lines; the rest is docs/design.md's."""
    lines = _text(module).splitlines()
    assert lines[0] == "--" and lines[1].startswith("-- Copyright") and lines[3] == "--"
    summary = []
    for line in lines[4:]:
        if not line.startswith("--"):
            break
        summary.append(line)
    assert 1 <= len(summary) <= 2, summary


@pytest.mark.parametrize("module", MODULES)
def test_public_ids_are_typed(module):
    """Slice and track ids of public tables are ``ID(...)`` / ``JOINID(...)``, as in the stdlib."""
    bad, table = [], None
    for line in _text(module).splitlines():
        m = _CREATE.match(line)
        if m:
            table = m.group(2) if m.group(1) in ("TABLE", "VIEW") and m.group(2).startswith("graph_ann_") else None
        elif line.startswith(")"):
            table = None
        elif table and re.match(r"^  (id|launch_id|track_id|\w+_slice_id) ", line):
            if not re.match(r"^  \w+ (ID|JOINID)\((slice|track)\.id\),?$", line):
                bad.append(f"{table}: {line.strip()}")
    assert not bad, bad


@pytest.mark.parametrize("module", MODULES)
def test_no_file_outside_the_repository_is_named(module):
    """A path a module names (``docs/design.md``, ``perfetto_graph_ann/query/diff.py``) is in
    this repository; outside references are URLs."""
    text = _text(module)
    assert "shared/" not in text and "FINDINGS" not in text and "PERFETTO_NOTES" not in text
    paths = {p for p in re.findall(r"(?<![\w/.:])((?:[\w.-]+/)+[\w.-]+\.(?:md|py|sql|json|proto))", text)}
    if REPO is None:
        pytest.skip("not run from a checkout")
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, missing


@pytest.mark.parametrize("module", MODULES)
def test_no_v52_traps(module):
    text = _text(module)
    code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    assert not re.search(r"\bANY\b", code), "type ANY does not exist in v52"
    assert "DELEGATES TO" not in code
    assert "stack_id" not in code, "slice.stack_id / parent_stack_id were removed in v54"
    assert "__intrinsic" not in code
    assert "@" not in code


@pytest.mark.parametrize("module", MODULES)
def test_includes_first_and_names_prefixed(module):
    text = _text(module)
    lines = [l for l in text.splitlines() if l.strip() and not l.startswith("--")]
    includes = [i for i, l in enumerate(lines) if l.startswith("INCLUDE PERFETTO MODULE")]
    assert includes == list(range(len(includes))), "INCLUDE lines come before any other statement"
    names = [n for _, n in _CREATE.findall(text)] + _VIRTUAL.findall(text)
    for name in names:
        assert name.startswith(("graph_ann_", "_graph_ann_")), name
    assert text.rstrip().endswith(";")


@pytest.mark.parametrize("module", MODULES)
def test_every_object_and_column_documented(module):
    lines = _text(module).splitlines()
    for i, line in enumerate(lines):
        v = _VIRTUAL.match(line)
        if v:
            assert lines[i - 1].startswith("--"), f"{v.group(1)}: no comment block above"
        m = _CREATE.match(line)
        if not m:
            continue
        assert lines[i - 1].startswith("--"), f"{m.group(2)}: no comment block above"
        # the schema / argument list: every entry needs a `--` line right above it
        j = i + 1
        while not lines[j].startswith(")"):
            entry = lines[j].strip()
            if entry and not entry.startswith("--"):
                assert lines[j - 1].strip().startswith("--"), f"{m.group(2)}: `{entry}` has no comment"
                if m.group(1) in ("TABLE", "VIEW"):
                    assert re.match(r"^\w+ (LONG|DOUBLE|STRING|BOOL|TIMESTAMP|DURATION|ARGSETID|INT|UINT|BYTES"
                                    r"|ID\(\w+\.\w+\)|JOINID\(\w+\.\w+\)),?$", entry), f"{m.group(2)}: untyped `{entry}`"
            j += 1
