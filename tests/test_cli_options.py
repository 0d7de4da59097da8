"""The CLI's shared options (cli/options.py parent parsers): each subcommand still accepts
what it accepted, with the same defaults, and each shared option is declared once."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from perfetto_graph_ann.cli.main import build_parser

CLI = Path(__file__).resolve().parents[1] / "perfetto_graph_ann" / "cli"


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


def test_convert_accepts_everything_it_did():
    a = parse("convert", "in.json", "-o", "x.pftrace", "-a", "s1", "--annotations", "s2", "--graph-lanes", "none",
              "--force-annotations", "--gzip", "--no-progress", "-q", "--default-stream", "3", "--typed-args")
    assert (a.input, a.output, a.annotations, a.graph_lanes) == ("in.json", "x.pftrace", ["s1", "s2"], "none")
    assert a.force_annotations and a.gzip and a.no_progress and a.quiet and a.typed_args and not a.compact_args
    assert a.default_stream == 3
    d = parse("convert", "in.json", "--output", "o.json", "--compact-args", "--quiet")
    assert (d.annotations, d.graph_lanes, d.force_annotations, d.gzip, d.no_progress, d.default_stream) == (
        [], None, False, False, False, None)  # None: torch's 7 (an explicit one is checked against the annotations)
    assert d.compact_args and d.quiet


def test_lanes_accepts_everything_it_did():
    a = parse("lanes", "t.json", "-a", "s", "--graph-lanes", "all", "--force-annotations", "--no-sql",
              "--engine", "portable", "-q")
    assert (a.trace, a.annotations, a.graph_lanes, a.engine) == ("t.json", ["s"], "all", "portable")
    assert a.force_annotations and a.no_sql and a.quiet
    d = parse("lanes", "t.json")
    assert (d.annotations, d.graph_lanes, d.force_annotations, d.no_sql, d.engine, d.quiet) == (
        [], None, False, False, "auto", False)


def test_report_accepts_everything_it_did():
    a = parse("report", "t.pftrace", "-a", "s", "--graph-lanes", "none", "--force-annotations", "--top", "3",
              "--format", "csv", "--engine", "native", "-o", "out.txt", "--quiet")
    assert (a.trace, a.annotations, a.graph_lanes, a.top_kernels, a.format, a.engine, a.output) == (
        "t.pftrace", ["s"], "none", 3, "csv", "native", "out.txt")
    assert a.force_annotations and a.quiet
    d = parse("report", "t.pftrace")
    assert (d.annotations, d.graph_lanes, d.force_annotations, d.top_kernels, d.format, d.engine, d.output, d.quiet) == (
        [], None, False, 5, "table", "auto", None, False)


def test_sql_accepts_everything_it_did():
    a = parse("sql", "t.pftrace", "SELECT 1", "--format", "json", "--engine", "portable", "--timeout", "2.5",
              "--output", "o", "-a", "s", "--graph-lanes", "all", "--force-annotations", "-q")
    assert (a.trace, a.sql, a.format, a.engine, a.timeout, a.output, a.annotations, a.graph_lanes) == (
        "t.pftrace", "SELECT 1", "json", "portable", 2.5, "o", ["s"], "all")
    assert a.force_annotations and a.quiet
    d = parse("sql", "t.pftrace", "SELECT 1")
    assert (d.format, d.engine, d.timeout, d.output, d.annotations, d.graph_lanes, d.force_annotations, d.quiet) == (
        "table", "auto", None, None, [], None, False, False)


def test_merge_accepts_everything_it_did():
    a = parse("merge", "r0.json", "r1.json", "-o", "all.pftrace", "-a", "s0", "-a", "s1", "--graph-lanes", "none",
              "--force-annotations", "--gzip", "--label", "x", "--label", "y", "-q")
    assert (a.traces, a.output, a.annotations, a.graph_lanes, a.label) == (
        ["r0.json", "r1.json"], "all.pftrace", ["s0", "s1"], "none", ["x", "y"])
    assert a.force_annotations and a.gzip and a.quiet
    d = parse("merge", "r0.json", "--output", "m.pftrace")
    assert (d.annotations, d.graph_lanes, d.force_annotations, d.gzip, d.label, d.quiet) == (
        [], None, False, False, [], False)  # None: all for a rank with annotated nodes, none for one without


def test_fleet_accepts_everything_it_did():
    a = parse("fleet", "dir", "f.json", "-a", "s0", "-a", "s1", "--no-sidecars", "--ray", "auto", "--ship", "store",
              "--workers", "4", "--memory-per-engine", "512", "--engine", "native", "--top", "3", "--format", "json",
              "--no-progress", "-o", "r.json")
    assert (a.inputs, a.annotations, a.ray, a.ship, a.workers, a.memory_per_engine, a.engine, a.top_collectives, a.format,
            a.output) == (["dir", "f.json"], ["s0", "s1"], "auto", "store", 4, 512, "native", 3, "json", "r.json")
    assert a.no_sidecars and a.no_progress
    d = parse("fleet", "dir")
    assert not d.annotations  # not given: the sidecars beside the traces are looked for
    assert (d.no_sidecars, d.ray, d.ship, d.workers, d.engine, d.top_collectives, d.format, d.no_progress, d.output) == (
        False, None, "auto", None, "auto", 10, "table", False, None)


def test_demo_accepts_everything_it_did():
    a = parse("demo", "--out", "d", "--shipped", "--replays", "2", "--engine", "native", "--no-sql")
    assert (a.out, a.mode, a.replays, a.engine, a.no_sql) == ("d", "shipped", 2, "native", True)
    d = parse("demo")
    assert (d.out, d.mode, d.replays, d.engine, d.no_sql) == ("demo_out", "auto", 5, "auto", False)
    assert parse("demo", "--live").mode == "live"


@pytest.mark.parametrize("argv", [
    ["convert", "in.json"],  # -o is required
    ["merge", "r0.json"],
    ["convert", "in.json", "-o", "x", "--typed-args", "--compact-args"],
    ["lanes", "t.json", "--graph-lanes", "some"],
    ["report", "t", "--engine", "fast"],
    ["sql", "t", "q", "--format", "xml"],
    ["fleet", "d", "--format", "xml"],
    ["convert", "in.json", "-o", "x", "--default-stream", "-5"],  # not a lane id
    ["convert", "in.json", "-o", "x", "--default-stream", "4294967296"],
    ["report", "t", "--top-kernels", "0"],
    ["demo", "--shipped", "--live"],
])
def test_what_was_refused_is_still_refused(argv, capsys):
    with pytest.raises(SystemExit) as ei:
        parse(*argv)
    assert ei.value.code == 2


SHARED = {"--annotations", "--graph-lanes", "--force-annotations", "--engine", "--quiet", "--no-progress", "--gzip",
          "--output", "--no-sql"}


def test_each_shared_option_is_declared_only_in_options():
    declared = []
    for path in sorted(CLI.glob("*.py")):
        if path.name == "options.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                flags = {a.value for a in node.args if isinstance(a, ast.Constant)}
                if flags & SHARED:
                    declared.append(f"{path.name}:{node.lineno}: {sorted(flags)}")
    assert declared == []


def test_shared_options_read_the_same_on_every_command():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    seen = {}
    for name, p in sub.items():
        for action in p._actions:
            flag = max(action.option_strings, key=len) if action.option_strings else None
            if flag in SHARED - {"--graph-lanes", "--annotations", "--output"}:
                seen.setdefault(flag, set()).add((action.help, action.metavar, action.default))
    # one declaration: the same help, metavar and default wherever the option appears
    assert seen and all(len(v) == 1 for v in seen.values()), seen
