"""The hand-written packet encoder against the perfetto.protos reference, byte for byte."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from perfetto_graph_ann.write.perfetto.interning import CATEGORIES, NAMES, Interner
from perfetto_graph_ann.write.perfetto.packets import FastEncoder, ProtosEncoder
from perfetto_graph_ann.write.perfetto.wire import varint

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


def test_lone_surrogates_and_long_strings():
    fi, pi = Interner(), Interner()
    fast, ref = FastEncoder(fi), ProtosEncoder(pi)
    args = {"bad\ud800": "x\udfff", "long": "y" * 500, "nested": [{"k\ud800": "\ud800"}, [], None]}
    names = [(i.iid(CATEGORIES, "c"), i.iid(NAMES, "n\ud800")) for i in (fi, pi)]
    assert fast.slice_begin(1, 2, *names[0], args) == ref.slice_begin(1, 2, *names[1], args)
