"""Benchmark (issue 33, third target): what a ``.pftrace``'s load costs, by trace content.

    python benchmarks/load_content.py TRACE.pftrace [--variants a,b,...] [--rounds 3] [--keep DIR]

Rewrites the trace packet by packet (perfetto's protobuf classes; packets a variant does not
touch are copied as they are) into variants, then loads the original and every variant into
fresh portable engines, taking turns within each round, and prints per file the engine CPU
seconds of parsing the chunks and of finalizing (medians; engine start excluded). Variants:

* ``no_kernel_args``: every BEGIN with more than one debug annotation loses them all (the
  kernels' args; a launch keeps its correlation): a lower bound, not a candidate;
* ``no_args``: every debug annotation removed;
* ``no_device_stream``: the ``device`` and ``stream`` annotations removed (2 of a kernel's 7);
* ``instants``: each BEGIN an INSTANT, ENDs dropped (what the BEGIN/END pairs cost);
* ``inline_names``: annotation names and string values written inline, not interned;
* ``absolute_ts``: absolute BOOTTIME timestamps instead of the sequence-scoped incremental
  clock 64 (the clock snapshots keep BOOTTIME only).

Only ``inline_names`` and ``absolute_ts`` keep every slice, arg and timestamp; the others
lose information and only bound what it costs. Build the 1M-kernel trace with
``python benchmarks/sql.py --kernels 1000000 --prepare PATH``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from proc import cpu_seconds  # noqa: E402

VARIANTS = ("no_kernel_args", "no_args", "no_device_stream", "instants", "inline_names", "absolute_ts")
_MIN_I64 = -(1 << 63)


def _varint(b: bytes, i: int):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _enc_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def rewrite(src: Path, dst: Path, variant: str) -> None:
    """Write ``variant`` of the trace ``src`` to ``dst``."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    data = src.read_bytes()
    out = []
    names, strings, last = {}, {}, {}
    i = 0
    while i < len(data):
        _, i = _varint(data, i)
        n, i = _varint(data, i)
        raw = data[i:i + n]
        i += n
        p = pb.TracePacket()
        p.ParseFromString(raw)
        seq = p.trusted_packet_sequence_id
        changed = False
        if p.sequence_flags & 1:
            names[seq], strings[seq] = {}, {}
        if p.HasField("interned_data"):
            for x in p.interned_data.debug_annotation_names:
                names[seq][x.iid] = x.name
            for x in p.interned_data.debug_annotation_string_values:
                strings[seq][x.iid] = x.str
        te = p.track_event if p.HasField("track_event") else None
        anns = te.debug_annotations if te is not None else ()
        if variant == "no_kernel_args" and te is not None and te.type == te.TYPE_SLICE_BEGIN and len(anns) > 1:
            del anns[:]
            changed = True
        elif variant == "no_args" and len(anns):
            del anns[:]
            changed = True
        elif variant == "no_device_stream" and len(anns):
            keep = [a for a in anns if names[seq].get(a.name_iid) not in ("device", "stream")]
            if len(keep) != len(anns):
                copies = []
                for a in keep:
                    c = pb.DebugAnnotation()
                    c.CopyFrom(a)
                    copies.append(c)
                del anns[:]
                anns.extend(copies)
                changed = True
        elif variant == "instants" and te is not None:
            if te.type == te.TYPE_SLICE_END:
                continue
            if te.type == te.TYPE_SLICE_BEGIN:
                te.type = te.TYPE_INSTANT
                changed = True
        elif variant == "inline_names" and len(anns):
            for a in anns:
                if a.HasField("name_iid"):
                    a.name = names[seq][a.name_iid]
                if a.HasField("string_value_iid"):
                    a.string_value = strings[seq][a.string_value_iid].decode()
            if p.HasField("interned_data"):
                del p.interned_data.debug_annotation_names[:]
                del p.interned_data.debug_annotation_string_values[:]
            changed = True
        elif variant == "absolute_ts":
            if p.HasField("trace_packet_defaults") and p.trace_packet_defaults.timestamp_clock_id == 64:
                p.trace_packet_defaults.timestamp_clock_id = 6
                changed = True
            if p.HasField("clock_snapshot"):
                for c in p.clock_snapshot.clocks:
                    if c.clock_id == 64:
                        last[seq] = c.timestamp
                keep = []
                for c in p.clock_snapshot.clocks:
                    if c.clock_id != 64:
                        k = type(c)()
                        k.CopyFrom(c)
                        keep.append(k)
                del p.clock_snapshot.clocks[:]
                p.clock_snapshot.clocks.extend(keep)
                changed = True
            elif p.HasField("timestamp") and seq in last:
                last[seq] += p.timestamp
                p.timestamp = last[seq]
                changed = True
        if changed:
            raw = p.SerializeToString()
        out.append(b"\x0a" + _enc_varint(len(raw)) + raw)
    dst.write_bytes(b"".join(out))


def load_once(path: Path):
    """(parse CPU s, finalize CPU s, wall s) of one load into a fresh portable engine."""
    from perfetto_graph_ann.query.engine import EngineConfig, create_engine

    eng = create_engine(path, EngineConfig(engine="portable"))
    try:
        eng.register_sql_packages()
        backend = eng._backend
        c0, t0 = cpu_seconds(eng.pid), time.perf_counter()
        with open(path, "rb") as f:
            for piece in iter(lambda: f.read(16 << 20), b""):
                r = backend.parse(piece)
                if r.error:
                    raise RuntimeError(r.error)
        c1 = cpu_seconds(eng.pid)
        backend.notify_eof()
        c2, t2 = cpu_seconds(eng.pid), time.perf_counter()
    finally:
        eng.close()
    return c1 - c0, c2 - c1, t2 - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", type=Path)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="write the variants here (default: a temporary folder)")
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants: {sorted(unknown)}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        files = {"original": args.trace}
        for v in variants:
            files[v] = folder / f"{args.trace.stem}.{v}.pftrace"
            rewrite(args.trace, files[v], v)
        print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
        runs = {k: [] for k in files}
        for r in range(args.rounds):
            for k, path in files.items():
                runs[k].append(load_once(path))
                p, f, w = runs[k][-1]
                print(f"round {r + 1} {k}: parse {p:.2f} finalize {f:.2f} CPU s, wall {w:.2f} s", flush=True)
        print(f"load average {os.getloadavg()[0]:.2f}\n")
        base = statistics.median(p + f for p, f, _ in runs["original"])
        print("| file | MB | parse CPU s | finalize CPU s | load CPU s | vs original |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for k, rs in runs.items():
            cpu = statistics.median(p + f for p, f, _ in rs)
            print(f"| {k} | {files[k].stat().st_size / 1e6:.1f} | {statistics.median(p for p, _, _ in rs):.2f} | "
                  f"{statistics.median(f for _, f, _ in rs):.2f} | {cpu:.2f} | {cpu - base:+.2f} |")


if __name__ == "__main__":
    main()
