"""The export benchmarks run where they can (issue 33): ``benchmarks/export.py``'s stand-in
profiler and phases on the CPU, and ``benchmarks/gpu/export_pace.py``'s CPU-side parts (its
timing wrapper, its refusal without CUDA), so the GPU run is not the first time they execute."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from perfetto_graph_ann._resources import demo_data_dir
from perfetto_graph_ann.annotations.capture_record import read_capture_record

ROOT = Path(__file__).resolve().parent.parent


def _load(path: Path, name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_export_benchmark_stand_in_and_phases(tmp_path):
    bench = _load(ROOT / "benchmarks" / "export.py", "bench_export")
    data = bench.trace_bytes(300)
    ann = read_capture_record(demo_data_dir() / "seed_block_annotated.capture.json")
    prof = bench.RecordedProfiler(data)
    from perfetto_graph_ann.capture.export import export

    layout = export(prof, tmp_path / "o.pftrace", ann, keep_json=tmp_path / "o.json")
    assert (tmp_path / "o.json").read_bytes() == data and layout.report.unmatched == 0
    export(prof, tmp_path / "p.pftrace", ann)  # the one export of the profile is reused
    assert (tmp_path / "p.pftrace").read_bytes() == (tmp_path / "o.pftrace").read_bytes()
    with pytest.raises(RuntimeError, match="already saved"):  # the stand-in, like torch, saves once
        prof.export_chrome_trace(str(tmp_path / "again.json"))
    ph = bench.phases(data, ann, str(tmp_path), "all")
    assert ph["kernels"] == layout.report.total > 250 and set(ph) >= {"parse", "join", "write"}


def test_export_pace_cpu_parts():
    pace = _load(ROOT / "benchmarks" / "gpu" / "export_pace.py", "bench_export_pace")

    class Prof:
        def export_chrome_trace(self, path):
            return path

    p = Prof()
    spent = pace._timed_method(p)
    assert p.export_chrome_trace("x") == "x" and len(spent) == 1 and spent[0] >= 0
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: run the benchmark itself")
    saved = sys.argv
    sys.argv = ["export_pace.py"]
    try:
        assert pace.main() == 2
    finally:
        sys.argv = saved


def test_decoder_synth_is_the_h200_shape():
    """benchmarks/decoder_synth.py: every kernel joins by calibration to its node, and each
    replay draws its layer / attn / mlp scopes (counted from the generator's own numbers)."""
    synth = _load(ROOT / "benchmarks" / "decoder_synth.py", "bench_decoder_synth")
    from perfetto_graph_ann.join import join
    from perfetto_graph_ann.read.kineto import parse_trace_bytes

    replays, layers = 3, 2
    trace = parse_trace_bytes(synth.decoder_trace(replays, layers), "synth")
    layout = join(trace, synth.decoder_annotations(layers), graph_lanes="all")
    per_layer = len(synth.PER_LAYER)
    assert per_layer == 23
    assert layout.report.total == layout.report.matched["calibrated"] == replays * layers * per_layer
    kernels = [e for e in trace.events if e.cat == "kernel"]
    assert all(layout.placements[e.index].args["layer"] == (i % (layers * per_layer)) // per_layer
               for i, e in enumerate(kernels))
    kinds = [r.kind for r in layout.ranges]
    assert kinds.count("replay") == replays and len(kinds) - replays == replays * layers * 3


def test_export_background_benchmark_runs(tmp_path, capsys, monkeypatch):
    bench = _load(ROOT / "benchmarks" / "export_background.py", "bench_export_background")
    monkeypatch.setattr(sys, "argv", ["export_background.py", "--replays", "2", "--layers", "2", "--rounds", "1"])
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    bench.main()
    out = capsys.readouterr().out
    assert "| handler bg wait |" in out and "| export bg done |" in out
    assert os.listdir(tmp_path) == []


def test_slack_slot_benchmark_runs_and_both_arms_write_the_same_bytes(tmp_path, monkeypatch, capsys):
    """``benchmarks/export_slack_slot.py`` at a few replays: its synthetic trace joins every
    replay's critical path, the two arms give the same bytes, and the writer's keys are put back."""
    from perfetto_graph_ann.write.perfetto import fast_args, fast_encoder

    before = (fast_args.VARYING_KEYS, fast_encoder.VARYING_KEYS, fast_encoder._VARYING_ORDER)
    bench = _load(ROOT / "benchmarks" / "export_slack_slot.py", "bench_slack_slot")
    monkeypatch.setattr(bench.tempfile, "tempdir", str(tmp_path))  # its outputs under tmp_path
    monkeypatch.setattr(sys, "argv", ["export_slack_slot.py", "--replays", "40", "--rounds", "1"])
    bench.main()
    out = capsys.readouterr().out
    assert "| slot |" in out and "| key |" in out and "NO" not in out
    assert (fast_args.VARYING_KEYS, fast_encoder.VARYING_KEYS, fast_encoder._VARYING_ORDER) == before


def test_text_path_benchmarks_run_and_their_arms_write_the_same_bytes(tmp_path, monkeypatch, capsys):
    """``benchmarks/convert_text_ab.py`` and ``benchmarks/export_loops_ab.py`` on a small decoder
    trace: every arm writes the same bytes, and the text path's switch is put back."""
    import tempfile

    from perfetto_graph_ann.annotations.files import save_annotations
    from perfetto_graph_ann.write.perfetto import emit

    if emit.TEXT_EVENTS is None:
        pytest.skip("the compiled packet loop (_encode) is not built or turned off")
    bench = _load(ROOT / "benchmarks" / "convert_text_ab.py", "bench_convert_text_ab")
    monkeypatch.setattr(sys, "argv", ["convert_text_ab.py", "--size", "3M", "--rounds", "2",
                                      "--dir", str(tmp_path / "text")])
    bench.main()
    out = capsys.readouterr().out
    assert "| on / off |" in out and "| on |" in out and "NO" not in out and emit.TEXT_EVENTS is True
    assert not (tmp_path / "text").exists()  # removed without --keep

    from benchmarks.decoder_synth import decoder_annotations, write_decoder_trace

    launches: list = []
    trace = tmp_path / "t.json"
    write_decoder_trace(str(trace), 6, launches=launches, kineto_times=True)
    ann = save_annotations(tmp_path / "t.annotations.json", decoder_annotations(record=launches))
    bench = _load(ROOT / "benchmarks" / "export_loops_ab.py", "bench_export_loops_ab")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its temporary folder under tmp_path
    monkeypatch.setattr(sys, "argv", ["export_loops_ab.py", str(trace), str(ann), "--rounds", "1"])
    bench.main()
    out = capsys.readouterr().out
    assert "| on / bytes26 |" in out and "| two-pass |" in out and "NO" not in out and emit.TEXT_EVENTS is True


def test_template_runs_benchmark_runs_and_its_arms_write_the_same_bytes(tmp_path, monkeypatch, capsys):
    """``benchmarks/template_runs_ab.py`` on a small synthetic decoder: both arms write the same
    bytes, the compiled template is put back, and nothing is left outside ``tmp_path``."""
    from perfetto_graph_ann.write.perfetto import fast_args

    if fast_args.template_runs is None:
        pytest.skip("the compiled writer (_encode) is not built or turned off")
    compiled = fast_args.template_runs
    bench = _load(ROOT / "benchmarks" / "template_runs_ab.py", "bench_template_runs_ab")
    monkeypatch.setattr(bench.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["template_runs_ab.py", "--recorded", "--synthetic", "92x3", "--rounds", "2"])
    bench.main()
    out = capsys.readouterr().out
    assert "| synthetic 92 nodes x 3 |" in out and "| yes |" in out and "NO" not in out
    assert fast_args.template_runs is compiled
    monkeypatch.setattr(sys, "argv", ["template_runs_ab.py", "--micro", "--rounds", "1"])
    bench.main()
    assert "| template of a kernel's 20 args | python " in capsys.readouterr().out
    assert fast_args.template_runs is compiled
    assert os.listdir(tmp_path) == []


def _bench_out(script: str, argv: list, tmp_path, monkeypatch, capsys) -> str:
    """What ``benchmarks/<script>`` prints with ``argv``, its temporary files under ``tmp_path``
    (which it must leave empty)."""
    import tempfile

    bench = _load(ROOT / "benchmarks" / script, "bench_" + script[:-3])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sys, "argv", [script, *argv])
    bench.main()
    assert os.listdir(tmp_path) == []
    return capsys.readouterr().out


def test_graph_derived_benchmark_runs_and_its_arms_write_the_same_bytes(tmp_path, monkeypatch, capsys):
    """``benchmarks/graph_derived_ab.py`` on a small synthetic decoder: both arms (the graph
    records' derived values dropped before each write, or kept) write the same bytes."""
    out = _bench_out("graph_derived_ab.py", ["--recorded", "--synthetic", "92x3", "--rounds", "2"], tmp_path,
                     monkeypatch, capsys)
    assert "| fresh s | kept s |" in out and "| synthetic 92 nodes x 3 |" in out and "| yes |" in out
    assert "NO" not in out


def test_sidecar_save_benchmark_runs_and_its_arms_save_the_same_bytes(tmp_path, monkeypatch, capsys):
    """``benchmarks/sidecar_save_ab.py`` on a small synthetic decoder: both arms save the same bytes."""
    out = _bench_out("sidecar_save_ab.py", ["--recorded", "--layers", "2", "--graphs", "2", "--rounds", "2"], tmp_path,
                     monkeypatch, capsys)
    assert "| synthetic 46 nodes |" in out and "| synthetic 2 graphs of 828 nodes |" in out
    assert "| yes |" in out and "NO" not in out


@pytest.mark.parametrize("form", [[], ["--json"]])
def test_sidecar_load_benchmark_runs_and_loads_what_it_saved(tmp_path, monkeypatch, capsys, form):
    """``benchmarks/sidecar_load.py`` on a small synthetic decoder and two of its graphs, both
    forms: the loaded graphs equal the saved ones (it exits otherwise)."""
    out = _bench_out("sidecar_load.py", ["--recorded", "--layers", "2", "--graphs", "2", "--rounds", "1", *form],
                     tmp_path, monkeypatch, capsys)
    assert "| synthetic 46 nodes | 46 |" in out and "| synthetic 2 graphs of 828 nodes | 1,656 |" in out
    assert ("(json)" in out) == bool(form)


def test_cli_convert_wall_benchmark_runs(tmp_path, monkeypatch, capsys):
    """``benchmarks/cli_convert_wall.py`` on the bundled recording, one round: both arms run the
    command in fresh processes."""
    out = _bench_out("cli_convert_wall.py", ["--recorded", "--rounds", "1"], tmp_path, monkeypatch, capsys)
    assert "| bundled seed_block_annotated |" in out


def test_first_export_imports_benchmark_runs(tmp_path, monkeypatch, capsys):
    """``benchmarks/first_export_imports.py`` on the bundled recording, one round, without torch:
    both arms write the same bytes, and as shipped the write loads no ``perfetto.protos`` classes."""
    out = _bench_out("first_export_imports.py", ["--recorded", "--rounds", "1", "--no-torch"], tmp_path, monkeypatch,
                     capsys)
    row = next(line for line in out.splitlines() if line.startswith("| bundled seed_block_annotated |"))
    assert row.endswith("| no | yes |"), row


def test_detach_timer_benchmark_runs(tmp_path, monkeypatch, capsys):
    """``benchmarks/detach_timer.py``, one short round: the old arm starts a timer thread at each
    of a capture's two calls, the shipped one none after its first (counted, not timed: the
    speed itself is the benchmark's to measure)."""
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", "60000")
    out = _bench_out("detach_timer.py", ["--captures", "20", "--rounds", "1"], tmp_path, monkeypatch, capsys)
    started = {line.split(" | ")[0].lstrip("| "): int(line.rstrip(" |").split(" | ")[-1])
               for line in out.splitlines() if line.startswith(("| new timer each time |", "| as shipped |"))}
    assert started == {"new timer each time": 40, "as shipped": 1}, out
