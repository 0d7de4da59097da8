"""GPU benchmark (issue 33): ``pga.export`` against torch's own ``export_chrome_trace``.

    python benchmarks/gpu/export_pace.py [--replays 100 20] [--rounds 3] [--layers 36] [--follow-from N] [--out DIR]

The 36-layer bf16 decoder of ``tests/gpu/blocks.py`` is captured once with ``pga.graph``
(calibrated by one replay outside the profiler); then, for each replay count and round, three
fresh profiles of that many replays (torch saves a profile only once, so every export needs
its own), exported as:

* ``torch``: ``prof.export_chrome_trace(json)``, torch's exporter alone;
* ``pga``: ``pga.export(prof, out.pftrace, graph_lanes="all")``, in all, and the
  ``export_chrome_trace`` call it makes inside (timed by wrapping the profiler's method), so
  ``pga / inner torch`` is a ratio on one profile;
* ``pga cold``: ``pga`` with no spare worker (``PERFETTO_GRAPH_ANN_EXPORT_SPARE=off``, the spare
  dropped first): every follow starts its worker as torch starts writing, as before session 39;
  ``pga`` itself runs as shipped (a spare started ahead by the export before, ``--settle`` seconds
  earlier, so that its imports are done as between a program's profiling cycles);
* ``pga`` with ``PERFETTO_GRAPH_ANN_EXPORT_FOLLOW=off``: torch's JSON read once written, in
  the caller (the default reads it while torch writes, in a worker, from 40,000 graphed
  kernels in the replay record: 100 replays here, not 20);
* ``pga+json``: the same with ``keep_json=`` (the raw JSON kept too);
* ``pga background``: ``pga.export(..., background=True)``: the caller's wait (torch's export,
  the annotations saved, the conversion process started), its ``export_chrome_trace`` inside,
  and the time until ``result()`` returns (the file whole);
* ``pga two-pass`` (``--two-pass``): ``pga`` with the two-pass read whatever the JSON's size;
* ``handler background``: ``pga.trace_handler(dir)(prof)`` (background, its default) as torch
  calls it at a cycle's end: the caller's wait, then until ``handler.wait()`` returns.

``--follow-from N`` runs every arm but the follow-off one with ``PERFETTO_GRAPH_ANN_EXPORT_FOLLOW=N``
(``0``: the worker follows torch's writing at every size).

Then the phases of ``pga.export`` after torch's JSON (parse, join, write) on the ``torch`` arm's
JSON, in memory (``benchmarks/export.py``'s ``phases``), and all of them as ``pga.export`` runs them
(``after torch's JSON``: ``convert.write_joined_file`` on that file, two passes from 4 MB; the
in-memory phases undercount it there). Prints one JSON line per round and a Markdown table of
the medians; the target (issue 33) is ``pga`` at most 2x ``torch`` (what the caller waits for: with ``background``, the wait). Needs CUDA; on a machine without it, it says so and exits 2.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _profile(torch, g, replays: int, settle: float = 0.0):
    """A fresh profile of ``replays`` replays, then ``settle`` seconds (untimed)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            g.replay()
        torch.cuda.synchronize()
    time.sleep(settle)
    return prof


def _timed_method(prof) -> list:
    """Wrap ``prof.export_chrome_trace`` so its seconds are appended to the returned list."""
    spent: list = []
    inner = prof.export_chrome_trace

    def export_chrome_trace(path):
        t = time.perf_counter()
        try:
            return inner(path)
        finally:
            spent.append(time.perf_counter() - t)

    prof.export_chrome_trace = export_chrome_trace
    return spent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replays", type=int, nargs="+", default=[100, 20])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--out", default=None, help="folder for the exported files (default: a temporary one)")
    ap.add_argument("--follow-from", default=None,
                    help="PERFETTO_GRAPH_ANN_EXPORT_FOLLOW for every arm but the follow-off one (default: unset)")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds slept (untimed) before each pga arm: a spare worker's imports done meanwhile")
    ap.add_argument("--two-pass", action="store_true",
                    help="an arm more: pga.export with the two-pass read whatever the JSON's size "
                         "(convert.TWO_PASS_MIN_BYTES 0)")
    args = ap.parse_args()
    if args.follow_from is not None:
        os.environ["PERFETTO_GRAPH_ANN_EXPORT_FOLLOW"] = args.follow_from
    import torch

    if not torch.cuda.is_available():
        print("export_pace: needs a CUDA GPU", file=sys.stderr)
        return 2
    import perfetto_graph_ann as pga
    from blocks import capture, decoder, decoder_weights
    from export import phases  # benchmarks/export.py

    fn = decoder(decoder_weights(args.layers))
    g, _ = capture(fn)
    g.replay()  # calibration, outside the profiler
    torch.cuda.synchronize()
    _profile(torch, g, 2)  # the profiler's own first-use cost, outside the measurement
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.layers} layers", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="pga-export-pace-") as tmp:
        out = args.out or tmp
        os.makedirs(out, exist_ok=True)
        for n in args.replays:
            for r in range(args.rounds):
                row = {"replays": n, "round": r}
                prof = _profile(torch, g, n, args.settle)
                src = os.path.join(out, f"torch_{n}_{r}.json")
                t = time.perf_counter()
                prof.export_chrome_trace(src)
                row["torch_s"] = time.perf_counter() - t
                row["json_mb"] = os.path.getsize(src) / 1e6
                from perfetto_graph_ann.capture import background

                prof = _profile(torch, g, n, args.settle)  # no spare: the worker started as torch starts writing
                inner = _timed_method(prof)
                os.environ["PERFETTO_GRAPH_ANN_EXPORT_SPARE"] = "off"
                background._drop_spare()
                try:
                    t = time.perf_counter()
                    pga.export(prof, os.path.join(out, f"cold_{n}_{r}.pftrace"), graph_lanes="all")
                    row["pga_cold_s"] = time.perf_counter() - t
                finally:
                    del os.environ["PERFETTO_GRAPH_ANN_EXPORT_SPARE"]
                row["pga_cold_over_inner_torch"] = row["pga_cold_s"] / inner[0]
                prof = _profile(torch, g, n, args.settle)
                inner = _timed_method(prof)
                if not background.has_spare(True):  # the export before started one; here only where it did not
                    background.prepare_spare()
                    time.sleep(args.settle)
                row["spare_ready"] = background.has_spare(True)
                t = time.perf_counter()
                layout = pga.export(prof, os.path.join(out, f"pga_{n}_{r}.pftrace"), graph_lanes="all")
                row["pga_s"] = time.perf_counter() - t
                row["pga_inner_torch_s"] = inner[0]
                row["kernels"] = layout.report.total
                row["unmatched"] = layout.report.unmatched
                from perfetto_graph_ann.capture.export import expected_kernels
                from perfetto_graph_ann.capture.recorded import recorded_annotations as _rec

                row["followed"] = expected_kernels(_rec())  # the replay record's kernels: follows from 40,000
                # the same export with torch's JSON read once written, in process
                prof = _profile(torch, g, n, args.settle)
                inner = _timed_method(prof)
                before = os.environ.get("PERFETTO_GRAPH_ANN_EXPORT_FOLLOW")
                os.environ["PERFETTO_GRAPH_ANN_EXPORT_FOLLOW"] = "off"
                try:
                    t = time.perf_counter()
                    pga.export(prof, os.path.join(out, f"in_process_{n}_{r}.pftrace"), graph_lanes="all")
                    row["pga_in_process_s"] = time.perf_counter() - t
                finally:
                    if before is None:
                        del os.environ["PERFETTO_GRAPH_ANN_EXPORT_FOLLOW"]
                    else:
                        os.environ["PERFETTO_GRAPH_ANN_EXPORT_FOLLOW"] = before
                row["pga_in_process_over_inner_torch"] = row["pga_in_process_s"] / inner[0]
                if args.two_pass:
                    from perfetto_graph_ann.pipeline import convert as convert_mod

                    prof = _profile(torch, g, n, args.settle)
                    inner = _timed_method(prof)
                    saved, convert_mod.TWO_PASS_MIN_BYTES = convert_mod.TWO_PASS_MIN_BYTES, 0
                    try:
                        t = time.perf_counter()
                        pga.export(prof, os.path.join(out, f"two_pass_{n}_{r}.pftrace"), graph_lanes="all")
                        row["pga_two_pass_s"] = time.perf_counter() - t
                    finally:
                        convert_mod.TWO_PASS_MIN_BYTES = saved
                    row["pga_two_pass_over_inner_torch"] = row["pga_two_pass_s"] / inner[0]
                prof = _profile(torch, g, n, args.settle)
                t = time.perf_counter()
                pga.export(prof, os.path.join(out, f"kept_{n}_{r}.pftrace"), graph_lanes="all",
                           keep_json=os.path.join(out, f"kept_{n}_{r}.json"))
                row["pga_keep_json_s"] = time.perf_counter() - t
                prof = _profile(torch, g, n, args.settle)
                inner = _timed_method(prof)
                t = time.perf_counter()
                h = pga.export(prof, os.path.join(out, f"bg_{n}_{r}.pftrace"), graph_lanes="all", background=True)
                row["pga_bg_wait_s"] = time.perf_counter() - t
                row["pga_bg_inner_torch_s"] = inner[0]
                h.result()
                row["pga_bg_done_s"] = time.perf_counter() - t
                prof = _profile(torch, g, n, args.settle)
                inner = _timed_method(prof)
                handler = pga.trace_handler(os.path.join(out, f"handler_{n}_{r}"), worker_name="w")
                t = time.perf_counter()
                handler(prof)
                row["handler_bg_wait_s"] = time.perf_counter() - t
                row["handler_bg_inner_torch_s"] = inner[0]
                assert len(handler.wait()) == 1
                row["handler_bg_done_s"] = time.perf_counter() - t
                from perfetto_graph_ann.capture.recorded import recorded_annotations
                from perfetto_graph_ann.pipeline.convert import write_joined_file

                with open(src, "rb") as f:
                    row.update({f"phase_{k}_s": v for k, v in phases(f.read(), recorded_annotations(), out, "all").items()
                                if k in ("parse", "join", "write")})
                t = time.perf_counter()  # what pga.export runs after torch's JSON, as it runs it
                write_joined_file(src, os.path.join(out, "after_json.pftrace"), recorded_annotations(), "all")
                row["after_json_s"] = time.perf_counter() - t
                row["pga_over_torch"] = row["pga_s"] / row["torch_s"]
                row["pga_over_inner_torch"] = row["pga_s"] / row["pga_inner_torch_s"]
                row["bg_wait_over_torch"] = row["pga_bg_wait_s"] / row["torch_s"]
                row["bg_wait_over_inner_torch"] = row["pga_bg_wait_s"] / row["pga_bg_inner_torch_s"]
                row["handler_wait_over_inner_torch"] = row["handler_bg_wait_s"] / row["handler_bg_inner_torch_s"]
                print(json.dumps(row), flush=True)
                rows.append(row)
    print("\n| replays | kernels | JSON MB | torch s | pga.export s | ratio | ratio (same profile) | "
          "keep_json s | parse s | join s | write s | after torch's JSON s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in args.replays:
        rs = [x for x in rows if x["replays"] == n]

        def med(k):
            return statistics.median(x[k] for x in rs)
        print(f"| {n} | {rs[0]['kernels']:,} | {med('json_mb'):.1f} | {med('torch_s'):.3f} | {med('pga_s'):.3f} | "
              f"{med('pga_over_torch'):.2f}x | {med('pga_over_inner_torch'):.2f}x | {med('pga_keep_json_s'):.3f} | "
              f"{med('phase_parse_s'):.3f} | {med('phase_join_s'):.3f} | {med('phase_write_s'):.3f} | "
              f"{med('after_json_s'):.3f} |")
        print(f"|   spare ready in {sum(x['spare_ready'] for x in rs)} of {len(rs)} rounds; no spare (cold): "
              f"pga.export {med('pga_cold_s'):.3f} s, {med('pga_cold_over_inner_torch'):.2f}x (same profile) |")
        print(f"|   replay record: {rs[0]['followed']:,} kernels; follow off (in process): "
              f"pga.export {med('pga_in_process_s'):.3f} s, "
              f"{med('pga_in_process_over_inner_torch'):.2f}x (same profile) |")
        if args.two_pass:
            print(f"|   two-pass read: pga.export {med('pga_two_pass_s'):.3f} s, "
                  f"{med('pga_two_pass_over_inner_torch'):.2f}x (same profile) |")
    print("\n| replays | torch s | background: caller waits s | ratio | ratio (same profile) | file whole after s | "
          "handler: caller waits s | ratio (same profile) | file whole after s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in args.replays:
        rs = [x for x in rows if x["replays"] == n]

        def med(k):
            return statistics.median(x[k] for x in rs)
        print(f"| {n} | {med('torch_s'):.3f} | {med('pga_bg_wait_s'):.3f} | {med('bg_wait_over_torch'):.2f}x | "
              f"{med('bg_wait_over_inner_torch'):.2f}x | {med('pga_bg_done_s'):.3f} | {med('handler_bg_wait_s'):.3f} | "
              f"{med('handler_wait_over_inner_torch'):.2f}x | {med('handler_bg_done_s'):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
