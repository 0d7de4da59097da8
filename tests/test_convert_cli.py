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


def test_cli_convert_with_a_join_imports_neither_pandas_nor_the_protos_classes(tmp_path):
    """``convert`` prints the join summary (``join.summary``), whose text needs no DataFrame:
    pandas (~0.2 s of a 0.5 s command, BENCHMARKS.md) is imported only by the tables that
    return one. The writer's packets are written by hand, the track descriptors too
    (``write/perfetto/descriptors.py``): ``perfetto_trace_pb2`` (~80 ms to import) is loaded
    only by the reference encoder, ``merge`` and the engine. In a fresh interpreter, the
    command writes its output and leaves both out."""
    import os
    import subprocess
    import sys

    from conftest import fixture_capture

    out = tmp_path / "t.pftrace"
    script = (f"import sys\nfrom perfetto_graph_ann.cli.main import main\n"
              f"assert main(['convert', {str(fixture_trace('seed_block_annotated'))!r}, '-o', {str(out)!r}, "
              f"'--annotations', {str(fixture_capture('seed_block_annotated'))!r}]) == 0\n"
              f"print('pandas' in sys.modules, 'perfetto.protos.perfetto.trace.perfetto_trace_pb2' in sys.modules)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    res = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "False False" and "join: " in res.stderr and out.stat().st_size > 0
