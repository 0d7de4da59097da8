"""One way to read and join (``pipeline.joined.read_and_join``), used by every entry point;
one rule for the graph lanes, one reading of a trace's rank, one optional progress phase."""
from __future__ import annotations

import contextlib
import gzip
import json

import pytest

from conftest import fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.model import AnnotationSet
from perfetto_graph_ann.errors import InputError, LaneOptionError
from perfetto_graph_ann.pipeline import joined as joined_mod
from perfetto_graph_ann.pipeline.joined import read_and_join, trace_rank
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.util.progress import phase

TRACE = "two_branch"


@pytest.fixture
def decisions(monkeypatch):
    """Every graph-lanes decision the pipeline makes, as (requested, decided)."""
    seen = []
    real = joined_mod.resolve_graph_lanes

    def spy(requested, *a, **k):
        got = real(requested, *a, **k)
        seen.append((requested, got))
        return got

    monkeypatch.setattr(joined_mod, "resolve_graph_lanes", spy)
    return seen


def _with_rank(tmp_path, rank, name="r.json.gz"):
    doc = json.loads(gzip.decompress(fixture_trace(TRACE).read_bytes()))
    info = dict(doc.get("distributedInfo") or {})
    if rank is _ABSENT:
        info.pop("rank", None)
    else:
        info["rank"] = rank
    doc["distributedInfo"] = info
    out = tmp_path / name
    out.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out


_ABSENT = object()


# -- the one function -------------------------------------------------------------------------

def test_files_paths_and_a_read_trace_give_the_same_layout(decisions):
    by_path = read_and_join(str(fixture_trace(TRACE)), [str(fixture_capture(TRACE))])
    by_trace = read_and_join(read_trace(str(fixture_trace(TRACE))), [str(fixture_capture(TRACE))])
    assert by_path.layout is not None and by_path.annotations is not None
    assert by_path.layout.placements.keys() == by_trace.layout.placements.keys()
    assert by_path.layout.graph_lanes == by_trace.layout.graph_lanes == "all"
    assert decisions == [(None, "all"), (None, "all")]


def test_no_annotations_no_join(decisions):
    for none in (None, []):
        got = read_and_join(str(fixture_trace(TRACE)), none)
        assert got.layout is None and got.annotations is None and got.trace.events
    assert decisions == []


def test_lane_options_without_files_are_refused_before_the_read(monkeypatch):
    from perfetto_graph_ann.read import kineto

    monkeypatch.setattr(kineto, "read_trace", lambda p: pytest.fail("read before the lane options were checked"))
    with pytest.raises(LaneOptionError, match="needs annotations"):
        read_and_join(str(fixture_trace(TRACE)), [], graph_lanes="all")
    with pytest.raises(LaneOptionError, match="--default-stream 9"):
        read_and_join(str(fixture_trace(TRACE)), [], default_stream=9)


def test_every_entry_point_decides_the_lanes_through_read_and_join(tmp_path, decisions):
    """convert, lanes, merge, diff's ranks, the fleet's workers and the live-profiler writers."""
    from perfetto_graph_ann.annotations.files import load_annotations
    from perfetto_graph_ann.cli.main import main
    from perfetto_graph_ann.pipeline.convert import convert_file, write_joined
    from perfetto_graph_ann.pipeline.merge import convert_rank
    from perfetto_graph_ann.pipeline.query import convert_for_task

    src, cap = str(fixture_trace(TRACE)), str(fixture_capture(TRACE))
    entry_points = {
        "convert_file": lambda: convert_file(src, str(tmp_path / "a.pftrace"), [cap]),
        "convert_file (Chrome JSON)": lambda: convert_file(src, str(tmp_path / "a.json"), [cap]),
        "lanes": lambda: main(["lanes", src, "--annotations", cap, "--no-sql", "-q"]),
        "convert_rank": lambda: convert_rank(src, load_annotations(cap)),
        "convert_for_task": lambda: convert_for_task(src, [cap], None, str(tmp_path / "b.pftrace")),
        "write_joined": lambda: write_joined(read_trace(src), str(tmp_path / "c.pftrace"), load_annotations(cap), None),
    }
    want = {"convert_file (Chrome JSON)": "none"}
    for name, run in entry_points.items():
        decisions.clear()
        run()
        assert decisions == [(None, want.get(name, "all"))], name


def test_all_without_annotated_nodes_is_one_error_everywhere(tmp_path):
    """The same LaneOptionError from each entry point (no raw ValueError, no silent fall back)."""
    from perfetto_graph_ann.pipeline.convert import write_joined
    from perfetto_graph_ann.pipeline.merge import convert_rank
    from perfetto_graph_ann.pipeline.query import convert_for_task

    src = str(fixture_trace(TRACE))
    empty = AnnotationSet()
    for run in (lambda: write_joined(read_trace(src), str(tmp_path / "c.pftrace"), empty, "all"),
                lambda: convert_rank(src, empty, graph_lanes="all"),
                lambda: convert_for_task(src, [], "all", str(tmp_path / "b.pftrace")),
                lambda: read_and_join(src, empty, graph_lanes="all")):
        with pytest.raises(LaneOptionError, match="graph_lanes='all'|graph-lanes all"):
            run()
    assert not list(tmp_path.iterdir())


# -- the rank of a trace ----------------------------------------------------------------------

@pytest.mark.parametrize("rank,want", [(_ABSENT, None), (0, 0), (3, 3), ((1 << 31) - 1, (1 << 31) - 1)])
def test_trace_rank(tmp_path, rank, want):
    assert trace_rank(read_trace(str(_with_rank(tmp_path, rank)))) == want


@pytest.mark.parametrize("rank", [-1, 1 << 31, True, "1", 1.0, None])
def test_a_rank_that_is_no_rank_is_refused_by_merge_and_the_fleet_alike(tmp_path, rank):
    """The fleet's workers used to drop such a rank silently (and fall back to the task's
    position); now they refuse it as ``merge`` does, naming the file."""
    from perfetto_graph_ann.pipeline.merge import convert_rank
    from perfetto_graph_ann.pipeline.query import convert_for_task

    path = _with_rank(tmp_path, rank)
    with pytest.raises(InputError, match=r"r\.json\.gz.*distributedInfo\.rank"):
        trace_rank(read_trace(str(path)))
    with pytest.raises(InputError, match="is not a rank"):
        convert_rank(path, None)
    with pytest.raises(InputError, match="is not a rank"):
        convert_for_task(str(path), [], None, str(tmp_path / "out.pftrace"))
    assert not (tmp_path / "out.pftrace").exists()


def test_merge_and_the_fleet_read_the_same_rank(tmp_path):
    from perfetto_graph_ann.pipeline.merge import convert_rank
    from perfetto_graph_ann.pipeline.query import convert_for_task

    path = _with_rank(tmp_path, 5)
    assert convert_rank(path, None, index=1).rank == 5
    assert convert_for_task(str(path), [], None, str(tmp_path / "o.pftrace"))["rank"] == 5
    absent = _with_rank(tmp_path, _ABSENT, "n.json.gz")
    assert convert_rank(absent, None, index=1).rank == 1  # its position
    assert "rank" not in convert_for_task(str(absent), [], None, str(tmp_path / "p.pftrace"))


# -- the optional progress phase --------------------------------------------------------------

def _recorder(names):
    """A progress stand-in whose phases append their names to ``names``."""
    class Recorder:
        @contextlib.contextmanager
        def phase(self, desc):
            names.append(desc)
            yield
    return Recorder


def test_phase_without_progress_shows_nothing_and_with_progress_names_it():
    with phase(None, "nothing"):
        pass
    names = []
    Recorder = _recorder(names)

    with phase(Recorder(), "reading x"):
        pass
    assert names == ["reading x"]


def test_read_and_join_names_its_phases_with_the_suffix():
    names = []
    Recorder = _recorder(names)

    read_and_join(str(fixture_trace(TRACE)), [str(fixture_capture(TRACE))], progress=Recorder(), suffix=" (1 of 2)")
    assert names == [f"reading {fixture_trace(TRACE).name} (1 of 2)", "joining the GPU work to the annotations (1 of 2)"]
