"""Benchmark (issue 33): the writer's whole-args templates on graphs of many nodes.

    python benchmarks/graph_templates_ab.py [--nodes 828 1380 2300 4600] [--kernels 46000] [--rounds 3]
    python benchmarks/graph_templates_ab.py --trace T.json.gz --annotations T.annotations.json [--rounds 3]

A joined graph kernel's args differ per node (its annotation fields), so each node's template is
built at its graph's first replay and hit at every later one. Before session 32 the cache turned
itself off once 1,024 misses outnumbered the hits, which a graph of over ~1,000 nodes does during
its first replay (HF's 36-layer Llama captures 1,636 kernel nodes), and kept at most 4,096
templates; every later event then took the per-key path. Now a graph node's misses do not count
towards turning it off, and its templates are kept up to ``FastArgs.GRAPH_CACHE_LIMIT``.

``benchmarks/decoder_synth.py``'s decoder (23 kernel nodes a layer, calibrated, a replay record)
with as many layers as ``--nodes`` asks, replayed until about ``--kernels`` kernels; each arm
writes it with ``convert.write_joined_file`` (what ``pga.export`` runs after torch's JSON), the
arms alternating after one untimed write (the first in a process pays for imports): ``before``
(the previous ``FastArgs._miss``, restored for the arm) and ``after``. Medians of the rounds;
the arms' outputs compared byte for byte. Then one more ``after`` write, untimed, for the
templates its largest encoder kept and their memory (keys and templates, ``sys.getsizeof`` of
every piece). ``--trace`` / ``--annotations``: a profile recorded on
the GPU machine instead (``benchmarks/gpu/record_export_trace.py --model hf-llama``), written to
a temporary file first.
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decoder_synth import decoder_annotations, write_decoder_trace  # noqa: E402

from perfetto_graph_ann.annotations.files import load_annotations  # noqa: E402
from perfetto_graph_ann.pipeline.convert import write_joined_file  # noqa: E402
from perfetto_graph_ann.write.perfetto.fast_args import FastArgs  # noqa: E402


def _miss_before(self, args, ck):
    """``FastArgs._miss`` as it was before session 32."""
    whole = self._whole
    self._whole_misses += 1
    tpl, encoded = self._template(args)
    if len(whole) < self.WHOLE_CACHE_LIMIT:
        whole[ck] = tpl
    if self._whole_misses >= 1024 and self._whole_misses > self._whole_hits:
        self._whole = None
    return encoded


def _deep_size(o) -> int:
    """Bytes of ``o`` and, for tuples and lists, of what they hold (a template's pieces)."""
    if isinstance(o, (tuple, list)):
        return sys.getsizeof(o) + sum(_deep_size(x) for x in o)
    return sys.getsizeof(o)


def _kept_templates(src: str, dst: str, ann) -> tuple:
    """(templates kept, bytes a template with its key) of the largest whole-args cache of a write."""
    after, seen = FastArgs._miss, []

    def spy(self, args, ck):
        seen.append(self)
        return after(self, args, ck)

    FastArgs._miss = spy
    try:
        write_joined_file(src, dst, ann, "all", label="decoder")
    finally:
        FastArgs._miss = after
    whole = max((e._whole or {} for e in seen), key=len, default={})
    size = sum(_deep_size(k) + _deep_size(v) for k, v in whole.items())
    return len(whole), size / max(1, len(whole))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[828, 1380, 2300, 4600])
    ap.add_argument("--kernels", type=int, default=46_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trace", help="a recorded profile (Kineto JSON, .gz or not) instead of the synthetic ones")
    ap.add_argument("--annotations", help="its annotations (with --trace)")
    args = ap.parse_args()
    if bool(args.trace) != bool(args.annotations):
        ap.error("--trace and --annotations go together")
    after = FastArgs._miss
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}")
    print("| nodes a graph | replays | kernels | before s | after s | after / before | same bytes | templates kept "
          "| bytes a template |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="pga-graph-templates-") as tmp:
        for nodes in ([None] if args.trace else args.nodes):
            src = os.path.join(tmp, "trace.json")
            if nodes is None:
                with (gzip.open if args.trace.endswith(".gz") else open)(args.trace, "rb") as f:
                    Path(src).write_bytes(f.read())
                ann = load_annotations(args.annotations)
                nodes = sum(len(g.nodes) for g in ann.graphs)
                layers, replays = nodes / 23, 0  # printed as they are: the recorded graphs' nodes
            else:
                layers = max(1, round(nodes / 23))
                replays = max(1, round(args.kernels / (layers * 23)))
                launches: list = []
                write_decoder_trace(src, replays, layers, launches=launches, kineto_times=True)
                ann = decoder_annotations(layers, record=launches)
            write_joined_file(src, os.path.join(tmp, "warm.pftrace"), ann, "all", label="decoder")  # untimed
            times: dict = {"before": [], "after": []}
            digests = set()
            for r in range(args.rounds):
                for arm in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    FastArgs._miss = _miss_before if arm == "before" else after
                    dst = os.path.join(tmp, f"{arm}.pftrace")
                    t = time.perf_counter()
                    write_joined_file(src, dst, ann, "all", label="decoder")
                    times[arm].append(time.perf_counter() - t)
                    digests.add(hashlib.sha256(Path(dst).read_bytes()).hexdigest())
            FastArgs._miss = after
            kept, each = _kept_templates(src, os.path.join(tmp, "kept.pftrace"), ann)
            b, a = statistics.median(times["before"]), statistics.median(times["after"])
            kernels = f"{round(layers * 23 * replays):,}" if replays else "-"
            print(f"| {round(layers * 23):,} | {replays or '-'} | {kernels} | {b:.3f} | "
                  f"{a:.3f} | {a / b:.2f}x | "
                  f"{'yes' if len(digests) == 1 else 'NO'} | {kept:,} | {each:,.0f} |")
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
