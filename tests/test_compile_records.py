"""Compile records (capture/compile_records.py): the launches of a generated graph kept on disk
and named again in another process; torch-free (FX nodes and dynamo's module stacks stand in
as plain objects with the same attributes)."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from perfetto_graph_ann.capture import compile_records as R
from perfetto_graph_ann.capture.compiled_paths import Item

BLOCK, LINEAR = "Block", "Linear"


_IDS: dict = {}


def stack(*frames):
    """An ``nn_module_stack`` as dynamo writes it: key (the module's id) -> (source text, class)."""
    return {_IDS.setdefault(src, str(1000 + len(_IDS))): (src, cls) for src, cls in frames}


def node(name, *frames, op="call_function"):
    return SimpleNamespace(op=op, name=name, meta={"nn_module_stack": stack(*frames)} if frames else {})


L0 = ("L['self'].layers[0]", BLOCK)
FC1 = ("L['self'].layers[0].fc1", LINEAR)
FC2 = ("L['self'].layers[0].fc2", LINEAR)


def graph(first, second):
    return [node("l_x_", op="placeholder"), node("linear", L0, first), node("linear_1", L0, second),
            node("output", op="output")]


def resolver():
    """Names modules as a process that named ``L['self']`` the root would: by the id in the key."""
    names = {}
    for frames in (stack(L0), stack(L0, FC1), stack(L0, FC2)):
        for key, (src, cls) in frames.items():
            rel = src[len("L['self']"):].replace("[0]", ".0").lstrip(".")
            names[key] = (rel, cls, rel.count(".") + 1)
    return lambda key: names.get(key)


def test_a_launch_is_named_from_the_traced_graphs_modules_as_a_fresh_compile_names_it():
    nodes = graph(FC1, FC2)
    keys = R.keys_of(n.meta.get("nn_module_stack") for n in nodes)
    exact = R.Launch("extern", None, "extern_kernels.mm", (R.origin_of(stack(L0, FC1)),))
    fused = R.Launch("kernel", "triton_0", None, (R.origin_of(stack(L0, FC1)), R.origin_of(stack(L0, FC2))))
    assert R.stack_of(exact, keys, resolver()) == Item("extern", None, (("layers.0", BLOCK), ("layers.0.fc1", LINEAR)),
                                                       True, "extern_kernels.mm")
    assert R.stack_of(fused, keys, resolver()) == Item("kernel", "triton_0", (("layers.0", BLOCK),), False)
    # an origin whose module the traced graph does not have, or that was unreadable: unknown, never guessed
    stray = R.Launch("kernel", "triton_1", None, ((("L['self'].other", LINEAR),),))
    assert R.stack_of(stray, keys, resolver()) == Item("kernel", "triton_1", (), False)
    assert R.stack_of(R.Launch("other", None, None, (None,)), keys, resolver()) == Item("other", None, (), False)
    assert R.stack_of(R.Launch("other", None, None, None), keys, resolver()) == Item("other", None, (), False)
    assert R.origin_of({"7": ("L['self']", 3)}) is None and R.origin_of(None) == ()


def test_the_fingerprint_tells_apart_graphs_that_differ_only_in_which_module_computes_what():
    a, b = graph(FC1, FC2), graph(FC2, FC1)  # the same ops and names; the Linears swapped
    assert R.graph_fingerprint(a) == R.graph_fingerprint(graph(FC1, FC2))
    assert R.graph_fingerprint(a) != R.graph_fingerprint(b)
    assert R.record_path("/r", "code", R.graph_fingerprint(a)) != R.record_path("/r", "code", R.graph_fingerprint(b))
    assert R.record_path("/r", "code", "f") != R.record_path("/r", "code2", "f")
    # the same code with its cache's files elsewhere (inductor's caches off or moved): one record
    assert (R.record_path("/r", "# kernel path: /tmp/a/x.py\nk = 1\n  # c\n", "f")
            == R.record_path("/r", "# kernel path: /tmp/b/x.py\nk = 1\n", "f"))
    meta = "m = {'num_load': 2, 'force_disable_caches': %s, 'spill_threshold': 16}"
    assert R.record_path("/r", meta % "True", "f") == R.record_path("/r", meta % "False", "f")
    assert R.record_path("/r", meta % "True", "f") != R.record_path("/r", meta.replace("2", "3") % "True", "f")
    # the same code and graph recorded by other recording logic (another version of this package)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(R, "_producer", lambda: "another")
        other = R.record_path("/r", "code", "f")
    assert other != R.record_path("/r", "code", "f") and len(R._producer()) == 64
    # placeholders renamed while AOT autograd looks the graph up in its cache: the same graph
    renamed = [node("p_0", op="placeholder")] + graph(FC1, FC2)[1:]
    assert R.graph_fingerprint(renamed) == R.graph_fingerprint(graph(FC1, FC2))
    assert R.graph_fingerprint([object()]) is None  # a node without op / name: no record


def test_records_round_trip_and_a_damaged_one_is_not_used(tmp_path):
    launches = [(0, R.Launch("extern", None, "extern_kernels.mm", (R.origin_of(stack(L0, FC1)), None))),
                (1, R.Launch("kernel", "triton_0", None, (R.origin_of(stack(L0, FC2)), ()))),
                (0, R.Launch("other", None, None, None))]
    path = str(tmp_path / "sub" / "rec.json")
    import signal

    swapped = []
    with pytest.MonkeyPatch.context() as m:  # written inside the program's compile: its SIGTERM handler stays
        m.setattr(signal, "signal", lambda *a: swapped.append(a))
        R.save(path, True, ["call", "partition_0"], launches)
    assert swapped == []
    assert R.load(path) == (True, ["call", "partition_0"], launches)
    assert os.listdir(tmp_path / "sub") == ["rec.json"]  # written whole, no temporary left
    doc = json.loads(open(path).read())

    def damaged(**change):
        bad = dict(doc, **change)
        p = tmp_path / "bad.json"
        p.write_text(json.dumps(bad))
        return R.load(str(p))

    assert damaged(version=2) is None and damaged(format="other") is None
    assert damaged(launches=[[5, "kernel", "k", None, None]]) is None  # no such function
    assert damaged(launches=[[0, "kernel", "k", None, [9]]]) is None  # no such stack
    assert damaged(launches=[[0, "launch", None, None, None]]) is None
    assert damaged(stacks=[[["L['self']", 3]]]) is None
    assert damaged(backward="yes") is None
    (tmp_path / "cut.json").write_text(open(path).read()[:40])
    assert R.load(str(tmp_path / "cut.json")) is None and R.load(str(tmp_path / "absent.json")) is None


@pytest.mark.parametrize("value, cache, want", [
    ("off", "/ind", None), ("OFF", None, None), ("/rec", "/ind", "/rec"), (None, "/ind", "/ind/perfetto_graph_ann"),
    (None, None, "/default/perfetto_graph_ann")])
def test_records_go_beside_inductors_cache_unless_told_otherwise(monkeypatch, value, cache, want):
    for name, v in (("PERFETTO_GRAPH_ANN_COMPILE_RECORDS", value), ("TORCHINDUCTOR_CACHE_DIR", cache)):
        if v is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, v)
    assert R.directory(lambda: "/default") == want
