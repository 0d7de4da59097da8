"""``perfetto-graph-ann sql``: formats, graph_ann modules, exit code 2 on errors."""
from __future__ import annotations

import csv
import io
import json

import pytest

from support.engine_support import fixture_trace, requires_portable, x_counts_by_cat
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.cli.sql import format_frame

pytestmark = requires_portable

GRAPH = str(fixture_trace("seed_block_graph"))
SQL = "SELECT category, COUNT(*) AS n FROM slice WHERE category IN ('kernel', 'cuda_runtime') GROUP BY category ORDER BY category"


def _expected():
    c = x_counts_by_cat("seed_block_graph")
    return [("cuda_runtime", c["cuda_runtime"]), ("kernel", c["kernel"])]


def test_csv_and_json_and_table(capsys):
    assert main(["sql", GRAPH, SQL, "--format", "csv", "--engine", "portable"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["category"], int(r["n"])) for r in rows] == _expected()

    assert main(["sql", GRAPH, SQL, "--format", "json"]) == 0
    assert [(r["category"], r["n"]) for r in json.loads(capsys.readouterr().out)] == _expected()

    assert main(["sql", GRAPH, SQL]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["category", "n"]
    assert [ln.split() for ln in lines[2:4]] == [[c, str(n)] for c, n in _expected()]
    assert lines[-1] == "(2 rows)"


def test_graph_ann_module_from_the_cli(capsys):
    sql = "INCLUDE PERFETTO MODULE graph_ann.gpu_work; SELECT COUNT(*) AS n FROM graph_ann_gpu_work"
    assert main(["sql", GRAPH, sql, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"n": x_counts_by_cat("seed_block_graph")["kernel"]}]


def test_output_file(tmp_path, capsys):
    out = tmp_path / "r.csv"
    assert main(["sql", GRAPH, SQL, "--format", "csv", "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"  # as convert says it; -q says nothing
    assert main(["sql", GRAPH, SQL, "--format", "csv", "-o", str(out), "-q"]) == 0
    assert capsys.readouterr().out == ""
    assert [(r["category"], int(r["n"])) for r in csv.DictReader(out.open())] == _expected()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["sql", GRAPH, "SELECT nope FROM slice"], "no such column: nope"),
        (["sql", "/no/such/trace.pftrace", "SELECT 1"], "/no/such/trace.pftrace: no such file"),
    ],
)
def test_errors_exit_2_with_the_path(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("perfetto-graph-ann sql: error: ")


def test_table_format_handles_nulls_and_empty():
    import pandas as pd

    text = format_frame(pd.DataFrame({"a": [1, None], "b": ["x", None]}), "table")
    assert "NULL" in text and text.rstrip().endswith("(2 rows)")
    assert format_frame(pd.DataFrame({"a": []}), "table").rstrip().endswith("(0 rows)")
