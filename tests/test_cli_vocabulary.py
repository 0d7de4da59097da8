"""One tool, one vocabulary (issue 32, item 7).

Shared options are declared once (cli/options.py) and mean the same on every command:
``--no-progress`` hides the progress line, ``-q`` prints only the result; ``--top-kernels``
and ``--top-collectives`` say what they count (the bare ``--top`` still works, with a
note); every command that prints tables has ``--format table|csv|json`` and several CSV
tables go to one file each; ``sql --timeout`` counts from the start; every ``-o`` says
``wrote``; the demo's tables read like the others (µs, %); an empty file reads the same
whatever reads it.
"""
from __future__ import annotations

import csv
import io
import re
import time

import pytest

from conftest import fixture_capture, fixture_trace
from support.engine_support import requires_portable
from perfetto_graph_ann.cli.main import build_parser, main
from perfetto_graph_ann.errors import EMPTY_FILE, GraphAnnError

SEED, CAP = str(fixture_trace("seed_block_annotated")), str(fixture_capture("seed_block_annotated"))
#: The commands that show progress while they work.
WITH_PROGRESS = {"convert", "lanes", "report", "sql", "merge", "diff", "fleet"}


def _subcommands():
    return next(a for a in build_parser()._actions if a.dest == "command").choices


def test_progress_and_quiet_are_on_every_command_that_has_progress():
    have = {}
    for name, p in _subcommands().items():
        flags = {o: a.help for a in p._actions for o in a.option_strings}
        have[name] = (flags.get("--no-progress"), flags.get("-q"))
    assert {n for n, (np, _) in have.items() if np} == WITH_PROGRESS
    assert {n for n, (_, q) in have.items() if q} == WITH_PROGRESS
    # one meaning each
    assert len({have[n] for n in WITH_PROGRESS}) == 1
    no_progress, quiet = have["convert"]
    assert "progress" in no_progress and quiet.startswith("print only the result")


def test_quiet_prints_only_the_result(tmp_path, capsys):
    out = tmp_path / "x.pftrace"
    assert main(["convert", SEED, "-a", CAP, "-o", str(out), "-q"]) == 0
    assert capsys.readouterr() == ("", "")
    assert main(["merge", SEED, "-a", CAP, "-o", str(tmp_path / "m.pftrace"), "-q"]) == 0
    assert capsys.readouterr() == ("", "")  # it printed the ranks, the join and "wrote" before
    assert main(["lanes", SEED, "-a", CAP, "--no-sql", "-q"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "GPU work per lane" in captured.out  # the tables are the result
    assert main(["lanes", SEED, "-a", CAP, "--no-sql", "--no-progress"]) == 0
    assert capsys.readouterr().err.startswith("join: ")  # --no-progress keeps the summary


@requires_portable
def test_report_quiet_has_no_join_summary(capsys):
    assert main(["report", SEED, "-a", CAP, "--engine", "portable", "-q", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.startswith("{")


def test_top_says_what_it_counts(capsys):
    p = _subcommands()
    report = p["report"].parse_args(["t", "--top-kernels", "3"])
    fleet = p["fleet"].parse_args(["d", "--top-collectives", "4"])
    assert (report.top_kernels, fleet.top_collectives) == (3, 4)
    assert capsys.readouterr().err == ""
    # the old spelling still works and says what to use instead
    assert p["report"].parse_args(["t", "--top", "2"]).top_kernels == 2
    assert "--top is deprecated here: use --top-kernels" in capsys.readouterr().err
    assert p["fleet"].parse_args(["d", "--top", "2"]).top_collectives == 2
    assert "--top is deprecated here: use --top-collectives" in capsys.readouterr().err


@requires_portable
def test_fleet_writes_csv_one_file_per_table_and_says_so(tmp_path, capsys):
    from support.fleet_synth import LIVE

    assert main(["fleet", str(LIVE), "--format", "csv", "-o", str(tmp_path / "fleet.csv"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(f"fleet.{t}.csv" for t in ("ranking", "worst_collectives", "collectives", "lanes",
                                                       "rank_info"))
    assert out.startswith("wrote 5 CSV files, one per table: ")
    for f in tmp_path.iterdir():
        text = f.read_text()
        assert not text.startswith("#")
        rows = list(csv.DictReader(io.StringIO(text)))
        assert rows or f.name == "fleet.worst_collectives.csv"
    ranking = list(csv.DictReader((tmp_path / "fleet.ranking.csv").open()))
    assert ranking[0]["rank"] == "1"
    # and -o of the table view says "wrote" too (it wrote silently)
    assert main(["fleet", str(LIVE), "-o", str(tmp_path / "f.txt"), "--no-progress"]) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 'f.txt'}\n"
    assert "Straggler ranking" in (tmp_path / "f.txt").read_text()


@requires_portable
def test_sql_timeout_counts_the_load(monkeypatch, capsys, tmp_path):
    """``--timeout`` bounds the whole command: a load that uses it up stops the command
    before the query (it used to start only after the load)."""
    import perfetto_graph_ann.cli.sql as sql_cli

    real = sql_cli.open_session

    def slow_open(*a, **k):
        session = real(*a, **k)
        time.sleep(4)  # a load that takes longer than the timeout
        return session

    monkeypatch.setattr(sql_cli, "open_session", slow_open)
    pf = tmp_path / "t.pftrace"
    assert main(["convert", SEED, "-o", str(pf), "-q"]) == 0
    assert main(["sql", str(pf), "SELECT 1 AS x", "--engine", "portable", "--timeout", "3"]) == 2
    err = capsys.readouterr().err
    assert f"error: {pf}: ran past its --timeout of 3 s" in err, err
    monkeypatch.setattr(sql_cli, "open_session", real)
    assert main(["sql", str(pf), "SELECT 1 AS x", "--engine", "portable", "--timeout", "30"]) == 0


@requires_portable
def test_demo_sql_summary_reads_like_the_other_tables(tmp_path):
    from perfetto_graph_ann.demo.runner import DemoConfig, run_demo

    out = io.StringIO()
    run_demo(DemoConfig(out_dir=tmp_path, mode="shipped", engine="portable"), out=out)
    text = out.getvalue()
    summary = text.split("SQL lane summary (graph_ann.lanes)\n")[1].split("\n\n")[0]
    assert "µs" in summary and "%" in summary, summary
    lanes = [line for line in summary.splitlines()[2:] if line.split()[1:2] == ["62"]]
    assert lanes and "62 attention" in lanes[0] and "0.0" not in lanes[0].split("attention")[1].split()[2], summary


def test_an_empty_file_reads_the_same_everywhere(tmp_path):
    from perfetto_graph_ann.annotations.files import load_annotations
    from perfetto_graph_ann.formats import sniff_trace
    from perfetto_graph_ann.read.kineto import read_trace

    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    problems = []
    for read in (read_trace, load_annotations, sniff_trace):
        with pytest.raises(GraphAnnError) as ei:
            read(empty)
        problems.append(str(ei.value))
    assert problems == [f"{empty}: {EMPTY_FILE}"] * 3


@requires_portable
def test_the_trace_processor_says_it_the_same_way(tmp_path):
    from perfetto_graph_ann.query.session import open_trace

    empty = tmp_path / "empty.pftrace"
    empty.write_bytes(b"")
    with pytest.raises(GraphAnnError, match=re.escape(EMPTY_FILE)):
        open_trace(empty, engine="portable")


@requires_portable
def test_csv_of_several_tables_goes_to_one_file_each(tmp_path, capsys):
    pf = tmp_path / "t.pftrace"
    assert main(["convert", SEED, "-a", CAP, "-o", str(pf), "-q"]) == 0
    out = tmp_path / "report.csv"
    assert main(["report", str(pf), "--engine", "portable", "--format", "csv", "-o", str(out)]) == 0
    said = capsys.readouterr().out
    written = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("report."))
    assert "report.lane_summary.csv" in written and "report.lane_top_kernels.csv" in written and len(written) >= 6
    assert not out.exists()
    for name in written:
        text = (tmp_path / name).read_text()
        assert "#" not in text.splitlines()[0] and not any(line.startswith("# ") for line in text.splitlines())
        assert name in said
    # on stdout the stream keeps its '# <table>' lines, and a note says so
    assert main(["report", str(pf), "--engine", "portable", "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("# lane_summary\n") and "one file per table" in captured.err
