"""Benchmark input (issue 33): a recorded profile cut to its first N graph replays, as Kineto
would have written a shorter profile of the same run.

    python benchmarks/cut_replays.py TRACE.json[.gz] ANNOTATIONS.json --replays 20 --out DIR

``export_pace.py`` measures ``pga.export`` at 100 and 20 replays on the GPU machine; the traces
``record_export_trace.py`` keeps from there have 100. This keeps, of every event, the text as
it is in the file (Kineto's spacing and its times' three decimals, which the readers' fast
paths depend on), dropping the events of the later replays: the graph launches after the first
N, the GPU work and flow events correlated with them, and the CUPTI overhead events after the
last kept replay's work. The annotations keep the replay record's first N calls of the
window that holds them (their graphs and start times). Writes ``DIR/tN.json`` and
``DIR/tN.annotations.json`` and prints their paths.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")
_BETWEEN = re.compile(r"[\s,]*")


def _correlation(e: dict):
    return e.get("id") if e.get("ph") in ("s", "f", "t") else (e.get("args") or {}).get("correlation")


def cut(text: str, replays: int) -> "tuple[str, set]":
    """``text`` (a Kineto trace) with only its first ``replays`` graph launches' events; and the
    correlations kept."""
    key = '"traceEvents": ['
    start = text.index(key) + len(key)
    dec = json.JSONDecoder()
    spans = []
    pos = start
    while True:
        pos = _BETWEEN.match(text, pos).end()
        if text[pos] == "]":
            break
        obj, end = dec.raw_decode(text, pos)
        spans.append((obj, pos, end))
        pos = end
    launches = sorted((e for e, _, _ in spans if e.get("ph") == "X" and e.get("name") in _LAUNCHES),
                      key=lambda e: e["ts"])
    if len(launches) < replays:
        sys.exit(f"the trace has {len(launches)} graph launches, fewer than {replays}")
    kept = {e["args"]["correlation"] for e in launches[:replays]}
    dropped = {e["args"]["correlation"] for e in launches[replays:]}
    last = max(e["ts"] + e.get("dur", 0) for e, _, _ in spans if e.get("ph") == "X" and _correlation(e) in kept)
    out = [text[a:b] for e, a, b in spans
           if _correlation(e) not in dropped and not (e.get("cat") == "overhead" and e["ts"] > last)]
    return text[:start] + "\n  " + ",\n  ".join(out) + "\n" + text[pos:], kept


def cut_annotations(ann: dict, replays: int) -> dict:
    """The annotations with the replay record's longest window cut to its first ``replays`` calls."""
    window = max(ann["replays"], key=lambda w: sum(len(t["graphs"]) for t in w["threads"]))
    for t in window["threads"]:
        t["graphs"] = t["graphs"][:replays]
        t["starts_ns"] = t["starts_ns"][:replays]
        t["head_uncertain"] = min(t["head_uncertain"], len(t["graphs"]))
        t["tail_uncertain"] = 0
    return ann


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("annotations")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    opener = gzip.open if args.trace.endswith(".gz") else open
    with opener(args.trace, "rt", encoding="utf-8") as f:
        text, _ = cut(f.read(), args.replays)
    json.loads(text)  # whole and valid
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = out / f"t{args.replays}.json"
    trace.write_text(text, encoding="utf-8")
    ann = cut_annotations(json.loads(Path(args.annotations).read_text()), args.replays)
    sidecar = out / f"t{args.replays}.annotations.json"
    sidecar.write_text(json.dumps(ann))
    print(trace)
    print(sidecar)


if __name__ == "__main__":
    main()
