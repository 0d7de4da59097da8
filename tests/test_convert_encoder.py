"""The hand-written packet encoder against the perfetto.protos reference, byte for byte."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from perfetto_graph_ann.write.perfetto.descriptors import (ProcessDescriptor, ThreadDescriptor, TrackDescriptor,
                                                          track_descriptor_bytes)
from perfetto_graph_ann.write.perfetto.fast_encoder import FastEncoder
from perfetto_graph_ann.write.perfetto.interning import CATEGORIES, NAMES, Interner
from perfetto_graph_ann.write.perfetto.protos_encoder import ProtosEncoder
from perfetto_graph_ann.write.perfetto.wire import varint

#: every test on the compiled packet hot path and the pure-Python one (conftest.writer_path)
pytestmark = pytest.mark.usefixtures("writer_path")

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=80),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=20)
arg_dicts = st.dictionaries(st.text(min_size=1, max_size=12), values, max_size=8)


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1))
def test_varint_matches_protobuf(v):
    if v < (1 << 63):
        assert pb.DebugAnnotation(int_value=v).SerializeToString() == b"\x20" + varint(v)
    if v >= 0:
        assert pb.DebugAnnotation(uint_value=v).SerializeToString() == b"\x18" + varint(v)


def test_varint_every_length_boundary():
    """Each fast path of ``varint`` (1-5 bytes) and the general loop, at and around its edges."""
    for n in range(1, 11):
        edge = 1 << (7 * n)
        for v in (edge - 2, edge - 1, edge, edge + 1):
            if v < (1 << 64):
                assert pb.DebugAnnotation(uint_value=v).SerializeToString() == b"\x18" + varint(v), v
    for v in (-1, -(1 << 28), -(1 << 35), -(1 << 63)):
        assert pb.DebugAnnotation(int_value=v).SerializeToString() == b"\x20" + varint(v), v


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(arg_dicts, st.integers(0, 1 << 40), st.text(max_size=20)), min_size=1, max_size=6),
       st.lists(st.integers(0, (1 << 64) - 1), max_size=3))
def test_fast_encoder_equals_protos_encoder(events, flows):
    """Same packets from both encoders over a sequence of events (interning and caches included)."""
    fi, pi = Interner(), Interner()
    fast, ref = FastEncoder(fi), ProtosEncoder(pi)
    for args, ts, name in events * 2:  # twice: the second pass hits the caches
        for enc, interner in ((fast, fi), (ref, pi)):
            enc._name = (interner.iid(CATEGORIES, "cat"), interner.iid(NAMES, name))
        a = fast.slice_begin(ts, 3, *fast._name, args, flows, flows[:1])
        b = ref.slice_begin(ts, 3, *ref._name, args, flows, flows[:1])
        assert a == b
        assert fast.instant(ts, 4, *fast._name, args) == ref.instant(ts, 4, *ref._name, args)
        assert fast.slice_end(ts, 3) == ref.slice_end(ts, 3)
    for v in (0, -3, 1 << 62, 2.5, float("inf")):
        assert fast.counter(7, 9, v) == ref.counter(7, 9, v)


@pytest.mark.parametrize("sequence_id", [2, 127, 300])
def test_own_sequence_default_track(sequence_id):
    """On a track's own sequence both encoders write its sequence id and leave out the default
    track's uuid (and only its), in BEGIN, instant, END and counter packets."""
    fi, pi = Interner(), Interner()
    fast, ref = FastEncoder(fi, sequence_id, 3), ProtosEncoder(pi, sequence_id, 3)
    args = {"stream": 7, "correlation": 12, "grid": [1, 2, 3]}
    for track in (3, 4, 3, 200):
        c, n = fi.iid(CATEGORIES, "kernel"), fi.iid(NAMES, "k")
        assert (c, n) == (pi.iid(CATEGORIES, "kernel"), pi.iid(NAMES, "k"))
        pairs = [(fast.slice_begin(5, track, c, n, args, [9], []), ref.slice_begin(5, track, c, n, args, [9], [])),
                 (fast.instant(5, track, c, n, args), ref.instant(5, track, c, n, args)),
                 (fast.slice_end(6, track), ref.slice_end(6, track)),
                 (fast.counter(7, track, 1.5), ref.counter(7, track, 1.5))]
        for a, b in pairs:
            assert a == b
            p = pb.Trace.FromString(a).packet[0]
            assert p.trusted_packet_sequence_id == sequence_id
            assert p.track_event.HasField("track_uuid") == (track != 3)


def test_lone_surrogates_and_long_strings():
    fi, pi = Interner(), Interner()
    fast, ref = FastEncoder(fi), ProtosEncoder(pi)
    args = {"bad\ud800": "x\udfff", "long": "y" * 500, "nested": [{"k\ud800": "\ud800"}, [], None]}
    names = [(i.iid(CATEGORIES, "c"), i.iid(NAMES, "n\ud800")) for i in (fi, pi)]
    assert fast.slice_begin(1, 2, *names[0], args) == ref.slice_begin(1, 2, *names[1], args)


varying_values = st.one_of(st.integers(min_value=-(1 << 65), max_value=1 << 65), st.text(max_size=70), st.none(),
                           st.floats(allow_nan=True), st.lists(st.integers(), max_size=3), st.booleans())


@settings(max_examples=80, deadline=None)
@given(arg_dicts, st.lists(st.tuples(varying_values, varying_values), min_size=2, max_size=8),
       st.sampled_from([0, 1, 2]))
def test_whole_args_template_cache_equals_protos_encoder(base, ids, where):
    """Args that repeat except the per-event ids (a replayed kernel's): template hits give the reference bytes.

    The ids sit first, in the middle or last, take any type (the slot falls back to the
    generic encoding) and the constant part may hold NaN, nested values or look-alikes.
    """
    from perfetto_graph_ann.write.perfetto.packets import VARYING_KEYS

    items = [(k, v) for k, v in base.items() if k not in VARYING_KEYS]
    fi, pi = Interner(), Interner()
    fast, ref = FastEncoder(fi), ProtosEncoder(pi)
    names = [(i.iid(CATEGORIES, "kernel"), i.iid(NAMES, "k")) for i in (fi, pi)]
    for corr, ext in ids * 2:
        pos = (0, len(items) // 2, len(items))[where]
        args = dict(items[:pos] + [("correlation", corr)] + items[pos:] + [("External id", ext)])
        assert fast.slice_begin(5, 3, *names[0], args) == ref.slice_begin(5, 3, *names[1], args)


def test_whole_args_cache_keeps_lookalike_values_apart():
    """1, 1.0, True and Decimal("1.0") / 1.0 encode differently or identically exactly as the reference does."""
    from decimal import Decimal

    fi, pi = Interner(), Interner()
    fast, ref = FastEncoder(fi), ProtosEncoder(pi)
    names = [(i.iid(CATEGORIES, "c"), i.iid(NAMES, "n")) for i in (fi, pi)]
    looks = [1, 1.0, True, Decimal("1.0"), "1", [1], [1.0], [True], None, float("nan"), 0, False, 2 ** 64 - 1, 2 ** 70]
    for rep in range(3):
        for corr, v in enumerate(looks):
            args = {"a": v, "correlation": corr + rep, "b": [v, v]}
            assert fast.slice_begin(1, 2, *names[0], args) == ref.slice_begin(1, 2, *names[1], args), (rep, v)
    assert fast._whole is not None and fast._whole_hits > 0  # the cache was used, not bypassed
    # None, NaN and inf all encode as JSON null: such keys are never stored, so they never hit
    assert fast._whole and not any(b"null" in k for k in fast._whole)


def test_whole_args_cache_turns_itself_off_on_unique_args():
    """All-distinct args (eager ops with per-call shapes): the template cache switches off, bytes unchanged."""
    fi, pi = Interner(), Interner()
    fast, ref = FastEncoder(fi), ProtosEncoder(pi)
    names = [(i.iid(CATEGORIES, "cpu_op"), i.iid(NAMES, "aten::mm")) for i in (fi, pi)]
    for n in range(1500):
        args = {"Input Dims": [[n, 4], [4, n % 7]], "External id": n, "Sequence number": n // 2}
        assert fast.slice_begin(n, 2, *names[0], args) == ref.slice_begin(n, 2, *names[1], args)
    assert fast._whole is None
    assert fast.slice_begin(9, 2, *names[0], {"x": 1}) == ref.slice_begin(9, 2, *names[1], {"x": 1})


def _graph_node_args(node: int, replay: int, correlation: int) -> dict:
    """A joined graph kernel's args (Kineto's, then the join's), distinct per node as the join writes them."""
    return {"device": 0, "stream": 7, "correlation": correlation, "grid": [node % 97 + 1, 1, 1], "block": [128, 1, 1],
            "name": "attn" if node % 2 else "mlp", "layer": node // 23, "graph id": 2,
            "graph node id": (2 << 32) | node, "replay": replay, "join": "calibrated"}


def test_whole_args_cache_stays_on_for_a_graph_of_many_nodes():
    """A graph of more nodes than the turn-off's 1,024 misses: every node misses once at the
    first replay (not counted against the cache), then hits at every later replay; bytes unchanged."""
    fi, pi = Interner(), Interner()
    fast, ref = FastEncoder(fi), ProtosEncoder(pi)
    names = [(i.iid(CATEGORIES, "kernel"), i.iid(NAMES, "k")) for i in (fi, pi)]
    nodes = 1500
    for replay in range(3):
        for node in range(nodes):
            args = _graph_node_args(node, replay, 40 + replay)
            got = fast.slice_begin(node, 3, *names[0], args)
            assert got == ref.slice_begin(node, 3, *names[1], args), (replay, node)
        if replay == 0:
            assert fast._whole is not None and len(fast._whole) == nodes and fast._whole_hits == 0
    assert fast._whole is not None and fast._whole_hits == 2 * nodes


def test_whole_args_cache_past_its_limit_for_graph_nodes_only():
    """Graph nodes' templates are kept up to GRAPH_CACHE_LIMIT, other args' up to WHOLE_CACHE_LIMIT;
    all-distinct args that are no graph node's still turn the cache off among graph nodes' misses."""
    fi, pi = Interner(), Interner()
    fast, ref = FastEncoder(fi), ProtosEncoder(pi)
    fast.WHOLE_CACHE_LIMIT, fast.GRAPH_CACHE_LIMIT = 8, 20
    names = [(i.iid(CATEGORIES, "kernel"), i.iid(NAMES, "k")) for i in (fi, pi)]
    for node in range(30):
        args = _graph_node_args(node, 0, 5)
        assert fast.slice_begin(1, 3, *names[0], args) == ref.slice_begin(1, 3, *names[1], args)
    assert len(fast._whole) == 20
    for n in range(10):
        args = {"Input Dims": [[n, 4]], "External id": n}
        assert fast.slice_begin(n, 2, *names[0], args) == ref.slice_begin(n, 2, *names[1], args)
    assert len(fast._whole) == 20  # full for other args already
    for n in range(1600):  # 1,066 more misses of other args, a third as many graph nodes' between them
        args = {"Input Dims": [[n, 4], [4, n % 7]], "External id": n}
        if n % 3 == 0:
            args = _graph_node_args(n, 1, 6)
        assert fast.slice_begin(n, 2, *names[0], args) == ref.slice_begin(n, 2, *names[1], args)
    assert fast._whole is None


#: Args like Kineto's (no null / NaN, which never enter the template cache): the template paths are hit.
clean_values = st.recursive(st.one_of(st.integers(-(1 << 64), 1 << 64), st.floats(allow_nan=False, allow_infinity=False),
                                      st.text(max_size=70), st.booleans()),
                            lambda inner: st.lists(inner, min_size=1, max_size=4), max_leaves=8)
clean_arg_dicts = st.dictionaries(st.text(min_size=1, max_size=12), clean_values, min_size=2, max_size=8)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.one_of(clean_arg_dicts, arg_dicts), st.lists(st.tuples(varying_values, varying_values), min_size=1, max_size=3),
                          st.sampled_from(["kernel", "", "cuda_runtime"]), st.sampled_from(["k", "m", "n\ud800"]),
                          st.sampled_from([3, 4, 300]), st.sampled_from([0, 1, 2, 3]), st.booleans(), st.integers(0, 1 << 40)),
                min_size=1, max_size=5),
       st.lists(st.integers(0, (1 << 64) - 1), max_size=3), st.sampled_from([(1, None), (5, 3)]))
def test_event_equals_interning_then_slice_begin(events, flows, seq):
    """``event`` (the writer's hot path: strings in, head/tail cache, inline one-slot template
    fill) gives the bytes of interning + ``slice_begin`` on the reference encoder, for begins
    and instants, with 0, 1 or 2 id slots of any type, empty args, any track, both sequence kinds."""
    from perfetto_graph_ann.write.perfetto.packets import TYPE_INSTANT, TYPE_SLICE_BEGIN, VARYING_KEYS

    fast, ref, plain = FastEncoder(Interner(), *seq), ProtosEncoder(Interner(), *seq), FastEncoder(Interner(), *seq)
    for base, ids, cat, name, track, slots, instant, ts in events * 3:  # repeats hit every cache
        items = [(k, v) for k, v in base.items() if k not in VARYING_KEYS]
        for corr, ext in ids:
            args = dict(items[:1] + ([("correlation", corr)] if slots & 1 else []) + items[1:]
                        + ([("External id", ext)] if slots & 2 else []))
            kind = TYPE_INSTANT if instant else TYPE_SLICE_BEGIN
            a = fast.event(ts, track, cat, name, args, flows, flows[:1], kind)
            b = ref.event(ts, track, cat, name, args, flows, flows[:1], kind)
            ci = plain.interner.iid(CATEGORIES, cat) if cat else 0
            c = plain.slice_begin(ts, track, ci, plain.interner.iid(NAMES, name), args, flows, flows[:1], kind)
            assert a == b == c


def test_event_one_slot_template_is_used():
    """A replayed kernel's args (one correlation slot) hit the one-slot template and stay exact."""
    fast, ref = FastEncoder(Interner()), ProtosEncoder(Interner())
    base = {"device": 0, "stream": 7, "correlation": 0, "grid": [16, 48, 1], "blocks per SM": 5.818182}
    for corr in (1, 127, 128, 1 << 14, 1 << 21, 1 << 28, 1 << 35, (1 << 63) - 1, 1 << 63, -1, "x", None, 2.5):
        args = dict(base, correlation=corr)
        assert fast.event(9, 3, "kernel", "k", args, (), (4,)) == ref.event(9, 3, "kernel", "k", args, (), (4,)), corr
    tpls = list(fast._whole.values())
    assert len(tpls) == 1 and type(tpls[0]) is tuple and tpls[0][1] == "correlation"
    assert fast._whole_hits >= 10


def test_event_reuses_a_slot_only_for_the_same_key_and_int_value():
    """The kernels of one replay share their launch's correlation (the last slot's bytes are
    reused); the same value under another id key, or 1 vs True / 1.0, must not reuse them."""
    fast, ref = FastEncoder(Interner(), 5, 3), ProtosEncoder(Interner(), 5, 3)
    kernel = {"device": 0, "stream": 7, "correlation": 0, "grid": [16, 48, 1]}
    runtime = {"cbid": 211, "External id": 0}
    seq = []
    for corr in (1, 1 << 30, 127, 128):
        seq += [("kernel", f"k{j}", dict(kernel, correlation=c)) for j, c in enumerate((corr, corr, True, 1.0, corr))]
        seq += [("cuda_runtime", "launch", dict(runtime, **{"External id": corr}))]
        seq += [("kernel", "k0", dict(kernel, correlation=c)) for c in (corr, corr)]
    for cat, name, args in seq * 2:
        assert fast.event(9, 3, cat, name, args, (), (4,)) == ref.event(9, 3, cat, name, args, (), (4,)), (name, args)
    assert fast._whole_hits >= 40


def test_event_and_end_lengths_and_deltas_at_the_varint_edges():
    """The inlined 1- and 2-byte varints of event() (time delta, TrackEvent and packet length)
    and of slice_end() (time delta), at and around 128 and 16384."""
    fast, ref = FastEncoder(Interner(), 4, 9), ProtosEncoder(Interner(), 4, 9)
    sizes = list(range(60, 200)) + list(range(16250, 16420))
    for ts in (0, 1, 127, 128, 129, 16383, 16384, 16385, 1 << 21, 1 << 40):
        for n in sizes[::7] if ts > 1 else sizes:  # every size once, the edges for every delta
            args = {"s": "x" * n, "correlation": ts}
            assert fast.event(ts, 9, "kernel", "k", args, (), (3,)) == ref.event(ts, 9, "kernel", "k", args, (), (3,)), (ts, n)
        assert ref.slice_end(ts, 9) == fast.slice_end(ts, 9)
        assert ref.slice_end(ts, 5) == fast.slice_end(ts, 5)  # not the sequence's track: its uuid written


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(arg_dicts, st.integers(0, 1 << 40), st.text(max_size=300)), min_size=1, max_size=4),
       st.lists(st.integers(0, (1 << 64) - 1), max_size=2), st.sampled_from([None, 3]))
def test_event_named_equals_protos_encoder(events, flows, default_track):
    """A slice begin with its name as a string (a replay slice's): the same bytes from both
    encoders, on the shared sequence and on a track's own, and the name read back as written."""
    fast = FastEncoder(Interner(), 2, default_track)
    ref = ProtosEncoder(Interner(), 2, default_track)
    for args, ts, name in events * 2:
        for track in (3, 4):
            a = fast.event_named(ts, track, "graph_replay", name, args, flows[:1], flows[1:])
            assert a == ref.event_named(ts, track, "graph_replay", name, args, flows[:1], flows[1:])
            te = pb.Trace.FromString(a).packet[0].track_event
            assert te.name == name and not te.HasField("name_iid") and te.type == pb.TrackEvent.TYPE_SLICE_BEGIN


def test_joined_kernel_args_hit_the_template_cache_and_stay_exact():
    """A graphed kernel's args after the join differ per event by ``graph node id`` and
    ``replay`` besides the correlation (issue 33): those are template slots too, so the
    kernels of every replay of one node share one template, and any value there (a string,
    a bool, 1.0, a huge or negative int) still gives the reference bytes."""
    fast, ref = FastEncoder(Interner()), ProtosEncoder(Interner())
    odd = ["x", True, 1.0, None, -1, 1 << 63, 1 << 70, [1, 2]]
    n = 0
    for replay in range(12):
        for node in range(5):
            args = {"queued": 0, "device": 0, "context": 1, "stream": 61 + node % 2, "correlation": 8 + 4 * replay,
                    "grid": [16, 48, 1], "block": [128, 1, 1], "name": "attn", "layer": node,
                    "graph id": 2, "graph node id": (2 << 32) | node, "replay": replay, "join": "calibrated",
                    "original_stream": 7}
            if replay == 11:
                args["replay"] = odd[node]
                args["graph node id"] = odd[-1 - node]
            n += 1
            assert fast.event(9, 3, "kernel", f"k{node}", args, (), (4,)) == \
                ref.event(9, 3, "kernel", f"k{node}", args, (), (4,)), (replay, node)
    assert len(fast._whole) == 5 and fast._whole_hits >= n - 2 * 5


def test_compiled_end_packet_equals_slice_end():
    """The writer's loop builds a FastEncoder's slice ends with the compiled ``end_packet``
    from the track's cached tail: the bytes of ``slice_end`` at every varint edge of the
    delta (negative and int64's ends included), or None where it leaves one to Python."""
    from perfetto_graph_ann.write.perfetto import fast_encoder

    if fast_encoder.end_packet is None:
        pytest.skip("the pure-Python path: slice_end alone")
    enc = FastEncoder(Interner(), 4, 9)
    for track in (9, 5, 300, 1 << 40):
        for ts in (0, 1, 127, 128, 16383, 16384, 1 << 21, 1 << 40, -1, -(1 << 63), (1 << 63) - 1):
            ref = enc.slice_end(ts, track)
            assert fast_encoder.end_packet(ts, enc.end_tails[track]) == ref, (track, ts)
    assert fast_encoder.end_packet(1 << 63, enc.end_tails[9]) is None  # not an int64: Python's varint
    assert fast_encoder.end_packet(True, enc.end_tails[9]) is None
    assert fast_encoder.end_packet(1, b"x" * 126) is None  # a packet of 128 bytes: its length is no longer one byte


def test_compiled_template_packet_leaves_odd_values_to_python():
    """``template_packet`` answers None (the Python fill runs) for a slot value that is neither
    an int in [0, 2^63) nor a float, and for args that are not a dict; otherwise the reference
    bytes (a float slot, a memset's bandwidth: the double after the name, as ``_one`` writes it)."""
    from perfetto_graph_ann.write.perfetto import fast_encoder

    if fast_encoder.template_packet is None:
        pytest.skip("the pure-Python path")
    tpl = (b"\x22\x04\x08\x01\x20\x00", "correlation", b"\x08\x02\x20", b"")
    for v in (-1, 1 << 63, True, "1", None):
        assert fast_encoder.template_packet(3, b"\x50\x02", b"", tpl, {"correlation": v}, b"", b"") is None, v
    for v in (1.0, -0.0, 1e300, float("nan"), float("inf")):
        body = b"\x08\x02\x29" + struct.pack("<d", v)
        te = tpl[0] + b"\x22" + bytes((len(body),)) + body  # the head and tail given empty
        p = b"\x40\x03" + b"\x50\x02" + b"\x5a" + bytes((len(te),)) + te + b"\x68\x02"  # ts, the sequence
        assert fast_encoder.template_packet(3, b"\x50\x02", b"", tpl, {"correlation": v}, b"", b"") == \
            b"\x0a" + bytes((len(p),)) + p, v
    assert fast_encoder.template_packet(3, b"\x50\x02", b"", tpl, {}, b"", b"") is None
    assert fast_encoder.template_packet(3, b"\x50\x02", b"", [(1, 2, 3)], {"correlation": 1}, b"", b"") is None
    fast, ref = FastEncoder(Interner()), ProtosEncoder(Interner())
    for corr in (0, 127, 128, (1 << 63) - 1):
        args = {"device": 0, "correlation": corr, "graph node id": corr, "replay": 3}
        for ts in (0, 127, 128, 1 << 40):
            assert fast.event(ts, 3, "kernel", "k", args, (), (4,)) == ref.event(ts, 3, "kernel", "k", args, (), (4,))
    for bw in (1.5, 2.25, float("nan"), 1.5, 3):  # a memset's bandwidth: a slot, filled in C from the second on
        args = {"device": 0, "bytes": 64, "memory bandwidth (GB/s)": bw, "correlation": 9}
        assert fast.event(5, 3, "gpu_memset", "Memset", args) == ref.event(5, 3, "gpu_memset", "Memset", args)


small_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.sampled_from([0, 1, -1, 1 << 63, 1.0, 0.0, -0.0, float("nan"), "", "1", "a"])),
    lambda inner: st.one_of(st.lists(inner, max_size=2), st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2)),
    max_leaves=4)
small_dicts = st.dictionaries(st.sampled_from(["a", "b", "correlation", "replay"]), small_values, max_size=3)


@settings(max_examples=400, deadline=None)
@given(small_dicts, small_dicts, st.sampled_from([(), ("correlation",), ("correlation", "replay")]))
def test_compiled_whole_args_key_tells_apart_what_json_does(a, b, blank):
    """Two args with one compiled whole-args key have one JSON key (so one template): the
    compiled key tells apart all the JSON key does; it answers None (the JSON key is used)
    wherever JSON has null (such args never get a template)."""
    from perfetto_graph_ann.write.perfetto import fast_args
    from perfetto_graph_ann.write.perfetto.packets import json_args

    if fast_args.args_key is None:
        pytest.skip("the pure-Python path: the JSON key alone")

    def json_key(d):
        d = {k: (0 if k in blank else v) for k, v in d.items()}
        try:
            return json_args(d)
        except (TypeError, ValueError, OverflowError):
            return None

    ka, kb = fast_args.args_key(a, blank), fast_args.args_key(b, blank)
    for d, k in ((a, ka), (b, kb)):
        if k is not None:  # None: the JSON key is used, always allowed
            j = json_key(d)
            assert k[:1] == b"\0" and j is not None and b"null" not in j, (d, j)
    if ka is not None and ka == kb:
        assert json_key(a) == json_key(b), (a, b)


#: values a template is made of: repeating ints (new ones encoded in C), strings, bools and
#: floats, lists of ints (their JSON text the cache key) and lists the C side leaves to ``_one``
template_values = st.one_of(
    st.integers(-3, 3), st.integers(-(1 << 64), 1 << 64), st.sampled_from(["a", "bb", "x" * 40]), st.booleans(),
    st.sampled_from([0.5, 1.0, -0.0, float("nan"), float("inf")]), st.none(),
    st.lists(st.integers(-(1 << 64), 1 << 64), max_size=3), st.lists(st.sampled_from([1, True, 1.0, "1", None]), max_size=3),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 2), max_size=2))
template_args = st.dictionaries(st.sampled_from(["correlation", "replay", "graph node id", "grid", "name", "n", "f",
                                                 "Input Dims", "skipped", "a" * 130]), template_values, max_size=7)


@settings(max_examples=300, deadline=None)
@given(st.lists(template_args, min_size=1, max_size=12), st.booleans(), st.integers(1, 4))
def test_compiled_template_equals_python_template(argss, as_text, limit):
    """``template_runs`` (``FastArgs._template`` in C) gives the Python template and encoded
    args, and leaves every per-key cache and the interner as the Python path does: a key's
    cache hits, new ints encoded and cached up to ``KEY_CACHE_LIMIT`` (then dropped), a key
    left out, a long name (interned: its prefix stays short), and the values it leaves to ``_one``."""
    from perfetto_graph_ann.write.perfetto import fast_args

    if fast_args.template_runs is None:
        pytest.skip("the pure-Python path: no compiled template")
    keep = frozenset(k for k in ("correlation", "replay", "graph node id", "grid", "name", "n", "f", "Input Dims",
                                 "a" * 130))
    made = []
    for compiled in (True, False):
        enc = fast_args.FastArgs(Interner(), list_text=as_text, typed_keys=frozenset({"Input Dims"}), keep=keep)
        enc.KEY_CACHE_LIMIT = limit
        runs = fast_args.template_runs if compiled else None
        got = []
        for args in argss * 2:  # the second time round: the keys' caches are filled
            saved, fast_args.template_runs = fast_args.template_runs, runs
            try:
                got.append(enc._template(args))
            finally:
                fast_args.template_runs = saved
        caches = {k: (ks[0], None if ks[1] is None else {repr(c): b for c, b in ks[1].items()}, ks[2])
                  for k, ks in enc._keys.items()}
        made.append((got, caches, enc.interner.pending))
    assert made[0] == made[1]


def test_compiled_template_takes_repeated_values_from_the_caches():
    """A node's template in C calls ``_one`` only for values it cannot take from a key's cache:
    a string or a list of floats met for the first time; never for an int (new ones are
    encoded in C) nor for a value met before (a list of ints by its JSON text, with or without
    lists written as text)."""
    from perfetto_graph_ann.write.perfetto import fast_args

    if fast_args.template_runs is None:
        pytest.skip("the pure-Python path: no compiled template")
    for as_text in (True, False):
        enc = fast_args.FastArgs(Interner(), list_text=as_text)
        calls = []
        one = enc._one
        enc._one = lambda k, v: calls.append(k) or one(k, v)
        first = {"grid": [2, 1, 1], "block": [128, -1, 1 << 62], "name": "attn", "f": [0.5], "graph node id": 7,
                 "x": -5, "on": True, "w": 0.25}
        enc._template(first)
        assert sorted(calls) == sorted(first)  # each key's first value makes its entry
        calls.clear()
        second = dict(first, **{"graph node id": 8, "x": 1 << 40, "f": [0.75]})
        assert enc._template(second)[1] == b"".join(one(k, v) for k, v in second.items())
        assert calls == ["f"], as_text  # a new list of floats: _one


def test_event_with_many_flows_or_odd_ids_gives_the_reference_bytes():
    """The compiled ``event_packet`` leaves to Python what it does not take (more than 8 flow
    ids, an args mapping that is not a dict, an array of other items than
    int64): the same bytes either way, outgoing ids an ``array('q')`` as flows.py keeps them."""
    import types

    fast, ref = FastEncoder(Interner()), ProtosEncoder(Interner())
    args = {"device": 0, "correlation": 5, "grid": [1, 2, 3]}
    from array import array

    cases = [((), ()), (tuple(range(9)), (7,)), ((1, 2), tuple(range(8))), ([3, 4], [5]),
             (((1 << 64) - 1,), (0,)),
             (array("q", [3, 4]), [5]), (array("q", range(9)), ()), (array("i", [6]), ()),
             # a launch's flows to its graph's kernels: laid out at once from 16 (wire.fixed64_fields)
             (tuple(range(1 << 40, (1 << 40) + 16)), tuple(range(17))), (array("q", range(756)), ()),
             ([(1 << 64) - 1, 0] * 9, list(range(255, 271)))]
    for _ in range(3):  # first sight, then the cached head and template
        for flows, terms in cases:
            for a in (args, types.MappingProxyType(args), {}, None):
                assert fast.event(300, 3, "kernel", "k", a, flows, terms) == ref.event(300, 3, "kernel", "k", a, flows, terms)


def test_a_kernels_critical_path_slack_is_a_template_slot():
    """Off the critical path a graphed kernel's args differ every replay by their slack: it is
    one of the varying keys, so its node's template is made once (before: once a replay, each a
    miss encoded in Python), and the bytes stay the reference's."""
    from perfetto_graph_ann.join.model import SLACK_ARG

    fast, ref = FastEncoder(Interner()), ProtosEncoder(Interner())
    for k, slack in enumerate([0, 1234, 99, 1 << 40, 7, 1234]):
        args = {"device": 0, "stream": 7, "correlation": 100 + k, "name": "mlp", "graph node id": 5, "replay": k,
                "join": "calibrated", SLACK_ARG: slack}
        ts = 10 * k
        assert fast.event(ts, 3, "kernel", "k", args, (), (4,)) == ref.event(ts, 3, "kernel", "k", args, (), (4,))
    assert fast._whole_misses == 1


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 756])
def test_fixed64_fields_lays_out_each_value_as_its_own_field(n):
    """``wire.fixed64_fields`` against one packed field per value (the layout it replaces from 16
    values), at the ends of fixed64's range; a value it cannot hold raises ``struct.error`` as
    packing it alone does, a list, a tuple or an ``array('q')`` alike."""
    import struct
    from array import array

    from perfetto_graph_ann.write.perfetto.wire import fixed64_fields

    values = [(i * 0x9E3779B97F4A7C15) % (1 << 64) for i in range(n)]
    values[-1] = (1 << 64) - 1
    for tag in (b"\xf9\x02", b"\x81\x03"):
        want = b"".join(tag + struct.pack("<Q", v) for v in values)
        assert fixed64_fields(tag, values) == want
        assert fixed64_fields(tag, tuple(values)) == want
    assert fixed64_fields(b"\xf9\x02", array("q", range(n))) == b"".join(b"\xf9\x02" + struct.pack("<Q", v)
                                                                          for v in range(n))
    for bad in (-1, 1 << 64):
        with pytest.raises(struct.error):
            fixed64_fields(b"\xf9\x02", [0] * (n - 1) + [bad])


int32s = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)
uint64s = st.integers(min_value=0, max_value=(1 << 64) - 1)
texts = st.text(max_size=40)
processes = st.builds(ProcessDescriptor, pid=int32s, process_name=st.none() | texts,
                      legacy_sort_index=st.none() | int32s, process_labels=st.lists(texts, max_size=3))
threads = st.builds(ThreadDescriptor, pid=int32s, tid=int32s, thread_name=st.none() | texts,
                    legacy_sort_index=st.none() | int32s)
descriptors = st.builds(TrackDescriptor, uuid=uint64s, parent_uuid=st.none() | uint64s, name=st.none() | texts,
                        description=st.none() | texts, process=st.none() | processes, thread=st.none() | threads,
                        counter=st.booleans(), child_ordering=st.none() | st.integers(0, 3),
                        sibling_order_rank=st.none() | int32s, sibling_merge_behavior=st.none() | st.integers(0, 3),
                        sibling_merge_key=st.none() | texts)


def _clean(text):
    return text.encode("utf-8", "replace").decode("utf-8")


@settings(max_examples=200, deadline=None)
@given(descriptors, st.integers(1, (1 << 32) - 1))
def test_track_descriptor_bytes_equal_the_protos_message(d, sequence_id):
    """The hand-written descriptor is the reference's message byte for byte, and reads back
    (with the ``perfetto.protos`` class) as every field that was set, and none that was not."""
    raw = track_descriptor_bytes(d)
    assert raw == ProtosEncoder.descriptor(d).SerializeToString()
    assert FastEncoder.descriptor_packet(d, sequence_id) == ProtosEncoder.descriptor_packet(d, sequence_id)
    m = pb.TrackDescriptor.FromString(raw)
    assert m.uuid == d.uuid
    for f in ("parent_uuid", "child_ordering", "sibling_order_rank", "sibling_merge_behavior"):
        assert m.HasField(f) == (getattr(d, f) is not None) and getattr(m, f) == (getattr(d, f) or 0), f
    for f in ("name", "description", "sibling_merge_key"):
        assert m.HasField(f) == (getattr(d, f) is not None) and getattr(m, f) == _clean(getattr(d, f) or ""), f
    assert m.HasField("counter") == d.counter
    assert m.HasField("process") == (d.process is not None) and m.HasField("thread") == (d.thread is not None)
    if d.process is not None:
        p = d.process
        assert (m.process.pid, m.process.process_name, m.process.legacy_sort_index, list(m.process.process_labels)) == \
            (p.pid, _clean(p.process_name or ""), p.legacy_sort_index or 0, [_clean(x) for x in p.process_labels])
        assert m.process.HasField("process_name") == (p.process_name is not None)
        assert m.process.HasField("legacy_sort_index") == (p.legacy_sort_index is not None)
    if d.thread is not None:
        t = d.thread
        assert (m.thread.pid, m.thread.tid, m.thread.thread_name, m.thread.legacy_sort_index) == \
            (t.pid, t.tid, _clean(t.thread_name or ""), t.legacy_sort_index or 0)
        assert m.thread.HasField("thread_name") == (t.thread_name is not None)
        assert m.thread.HasField("legacy_sort_index") == (t.legacy_sort_index is not None)
    (packet,) = pb.Trace.FromString(FastEncoder.descriptor_packet(d, sequence_id)).packet
    assert packet.trusted_packet_sequence_id == sequence_id and packet.track_descriptor == m


@settings(max_examples=200, deadline=None)
@given(st.integers(0, (1 << 63) - 1), st.integers(-(1 << 63), (1 << 64) - 1), st.integers(1, (1 << 32) - 1),
       st.none() | uint64s)
def test_sequence_start_equals_the_protos_packets(t0, base_time_ns, sequence_id, track):
    """A sequence's opening packets (defaults, the clock snapshot with REALTIME where the base
    time gives one in range) are the reference's, and read back as set."""
    fast = FastEncoder(Interner(), sequence_id, track)
    ref = ProtosEncoder(Interner(), sequence_id, track)
    got = fast.sequence_start(t0, base_time_ns)
    assert got == ref.sequence_start(t0, base_time_ns)
    first, clock = pb.Trace.FromString(b"".join(got)).packet
    assert first.trusted_packet_sequence_id == sequence_id and first.sequence_flags == 1
    assert first.trace_packet_defaults.timestamp_clock_id == 64
    assert first.trace_packet_defaults.HasField("track_event_defaults") == (track is not None)
    assert first.trace_packet_defaults.track_event_defaults.track_uuid == (track or 0)
    clocks = [(c.clock_id, c.timestamp, c.is_incremental) for c in clock.clock_snapshot.clocks]
    realtime = [(1, base_time_ns + t0, False)] if base_time_ns and 0 <= base_time_ns + t0 < (1 << 64) else []
    assert clocks == [(64, t0, True), (6, t0, False)] + realtime
    assert clock.clock_snapshot.primary_trace_clock == 6 and clock.trusted_packet_sequence_id == sequence_id


def test_sort_window_mark_equals_the_protos_packets():
    mark = FastEncoder.sort_window_mark()
    assert mark == ProtosEncoder.sort_window_mark()
    events = [p.service_event for p in pb.Trace.FromString(mark).packet]
    assert [(e.all_data_sources_flushed, e.read_tracing_buffers_completed) for e in events] == \
        [(True, False), (True, False), (False, True)]
