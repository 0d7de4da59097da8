"""`perfetto-graph-ann convert` end to end on a fixture (plain, gzip, progress bar)."""
from __future__ import annotations

import collections
import gzip

from conftest import fixture_trace
from support.pftrace_decode import decode
from test_convert_fixtures import expected_slices, source
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert


def test_cli_convert(tmp_path, capsys):
    out = tmp_path / "t.pftrace"
    assert main(["convert", str(fixture_trace("seed_block_graph")), "-o", str(out)]) == 0
    assert "70 flows" in capsys.readouterr().out
    got = collections.Counter((s.cat, s.name, s.ts, s.dur) for s in decode(out).slices)
    assert got == expected_slices(source("seed_block_graph"))
    assert [p.name for p in tmp_path.iterdir()] == ["t.pftrace"]


def test_cli_gzip_flag(tmp_path):
    out = tmp_path / "t.pftrace"
    assert main(["convert", str(fixture_trace("two_branch")), "-o", str(out), "--gzip", "-q"]) == 0
    data = out.read_bytes()
    assert data[:2] == b"\x1f\x8b"
    plain = tmp_path / "p.pftrace"
    convert(fixture_trace("two_branch"), plain)
    assert gzip.decompress(data) == plain.read_bytes()


def test_progress_bar_when_asked(tmp_path, capsys):
    convert(fixture_trace("two_branch"), tmp_path / "a.pftrace", ConvertConfig(progress=True))
    assert "convert" in capsys.readouterr().err
    convert(fixture_trace("two_branch"), tmp_path / "b.pftrace", ConvertConfig(progress=False))
    assert capsys.readouterr().err == ""
