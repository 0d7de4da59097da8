"""Benchmark (issue 33): the annotations saved for a background export's worker, on the
caller's path (``pga.export(..., background=True)`` and ``trace_handler``'s default), before
and after session 34.

    python benchmarks/sidecar_save_ab.py [--recorded T7 HF20] [--layers 36 72] [--graphs 32] [--rounds 15]

Arms, alternating each round, each into a new folder: ``before`` (as ``background.start`` saved
them until session 34: ``files.save_annotations(path, annotations, "binary")``, every graph's
message built again and the file written atomically: fsync and rename; the records' derived
values dropped first) and ``after`` (``background.save_for_worker``: each graph's serialized
message kept on its record, a scratch file). Both run on the same records, as a process
exporting every profiling cycle saves the same graphs (and a new replay record) each time.
Medians in milliseconds; the files compared byte for byte.

``--recorded NAME``: ``.bench-data/NAME.annotations.json`` (recorded on the GPU machine by
``benchmarks/gpu/record_export_trace.py``; not in the repository); ``--layers N``:
``benchmarks/decoder_synth.py``'s decoder of N layers (23 kernel nodes a layer, scopes,
calibration, a replay record of 7 launches); ``--graphs N``: N such graphs of 36 layers (one
per batch size, as a serving engine captures them; 0: none).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from decoder_synth import decoder_annotations, with_batch_sizes  # noqa: E402
from template_runs_ab import machine_line  # noqa: E402

from perfetto_graph_ann.annotations.files import load_annotations, save_annotations  # noqa: E402
from perfetto_graph_ann.capture.background import save_for_worker  # noqa: E402


def _inputs(args):
    for name in args.recorded:
        yield f"recorded {name}", load_annotations(str(ROOT / ".bench-data" / f"{name}.annotations.json"))
    for layers in args.layers:
        yield f"synthetic {layers * 23} nodes", decoder_annotations(layers, record=list(range(1, 8)))
    if args.graphs:
        ann = with_batch_sizes(decoder_annotations(36, record=list(range(1, 8))), args.graphs)
        yield f"synthetic {args.graphs} graphs of {len(ann.graphs[0].nodes)} nodes", ann

def input_args(doc: str, layers: List[int], rounds: int, json: bool = False) -> argparse.Namespace:
    """The command line of a script taking :func:`_inputs` (``--recorded``, ``--layers``,
    ``--graphs``), ``--rounds`` and, with ``json``, ``--json``; prints the machine line."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--recorded", nargs="*", default=["t7", "hf20"])
    ap.add_argument("--layers", type=int, nargs="*", default=layers)
    ap.add_argument("--graphs", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=rounds)
    if json:
        ap.add_argument("--json", action="store_true", help="JSON sidecars rather than binary ones")
    args = ap.parse_args()
    print(machine_line())
    return args


def main() -> None:
    args = input_args(__doc__, [36, 72], 15)
    print("| annotations | sidecar KB | before ms | after ms | after / before | same bytes |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory(prefix="pga-sidecar-save-") as tmp:
        for k, (label, ann) in enumerate(_inputs(args)):
            times: dict = {"before": [], "after": []}
            blobs = set()
            for r in range(args.rounds):
                for arm in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    folder = os.path.join(tmp, f"{k}-{arm}{r}")
                    os.mkdir(folder)
                    if arm == "before":
                        for g in ann.graphs:
                            g.__dict__.pop("_derived", None)
                    t = time.perf_counter()
                    if arm == "before":
                        path = save_annotations(os.path.join(folder, "annotations.pgab"), ann, "binary")
                    else:
                        path = save_for_worker(ann, folder)
                    times[arm].append(time.perf_counter() - t)
                    blobs.add(Path(path).read_bytes())
            b, a = (statistics.median(times[k]) * 1e3 for k in ("before", "after"))
            size = len(next(iter(blobs))) / 1e3
            print(f"| {label} | {size:.0f} | {b:.2f} | {a:.2f} | {a / b:.2f}x | {'yes' if len(blobs) == 1 else 'NO'} |")
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
