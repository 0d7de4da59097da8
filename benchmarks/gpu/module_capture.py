"""Capture cost of zero-code instrumentation with module scopes, on the 36-layer decoder written
as ``nn.Module`` s (run on the GPU machine; issue 31's limit: at most 1.10x a plain capture).

The decoder of tests/gpu/blocks.py (same weights, bf16, batch 16, seq 128) as modules: per
layer ``Layer`` > ``attn`` (``norm``, ``qkv``, ``o``) and ``mlp`` (``norm``, ``gu``, ``down``),
9 module calls a layer, 325 in all. Arms, captured with ``torch.cuda.graph`` in alternating
order each round (the same code; only the process's instrumentation differs):

- ``plain``: not instrumented;
- ``instrumented``: ``pga.instrument()`` (graph annotated, no module scopes);
- ``modules``: ``pga.instrument(modules=True)``: a scope per module call (edges from CUPTI's
  node-created callback where CUPTI allows it: capture/nodewatch.py);
- ``modules_driver``: the same with ``PERFETTO_GRAPH_ANN_NODE_WATCH=0`` (edges ask the driver:
  counts, then marker nodes past 512 nodes).

The statistic is the median over rounds of each capture's time divided by the plain capture of
the same round ("pairs", BENCHMARKS.md "capture", session 11). Outputs must be bitwise equal.
Arms share one process, so CUPTI, once an instrumented arm initialised it, also taxes the plain
arm (~8%: BENCHMARKS.md, "what an initialised CUPTI costs a process"); ``--plain-detached``
detaches CUPTI before every plain capture and initialises it again before the others (both
untimed), so the plain arm is what a process that never initialised CUPTI captures, and adds
two plain arms that split what an instrumented capture pays into CUPTI's part and ours:

- ``plain_cupti``: plain, CUPTI initialised (nothing subscribed: what the warm-up or a capture's
  id calls leave);
- ``plain_watch``: plain, with the node watch subscribed around it (CUPTI's node-created
  callback counting every node, as under module scopes; no scope, no annotation).

``--settle``: an untimed plain capture right before every timed one (after any CUPTI switch), so
that no arm pays for its place in the round: without it the first capture of a round (after the
previous round's replays) and the first after CUPTI is initialised again each took ~0.7-1.5 ms
more (session 18), as much as the differences measured.

``--model hf-llama``: the same arms on ``transformers``' own ``LlamaForCausalLM`` (random
weights, bf16, SDPA, 36 layers of hidden 1024, batch 16, 128 tokens; 13 module calls a layer,
473 in all), a decoder as people run it rather than written for this benchmark (needs
``transformers``: carry its wheels, tests/gpu/RESULTS.md).

    python benchmarks/gpu/module_capture.py --rounds 40 [--plain-detached] [--settle] [--model toy|hf-llama]
                                            [--out FILE]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "gpu"))
import perfetto_graph_ann as pga  # noqa: E402
from blocks import decoder_weights, warmup  # noqa: E402
from perfetto_graph_ann.capture import fastpath, nodewatch  # noqa: E402
from perfetto_graph_ann.capture.registry import REGISTRY  # noqa: E402


class Norm(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = w

    def forward(self, h):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w


class Proj(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = w

    def forward(self, h):
        return h @ self.w


class Attn(torch.nn.Module):
    def __init__(self, P, heads):
        super().__init__()
        self.norm, self.qkv, self.o, self.heads = Norm(P["n1"]), Proj(P["qkv"]), Proj(P["o"]), heads

    def forward(self, h):
        b, t, d = h.shape
        q, k, v = (x.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for x in self.qkv(self.norm(h)).split(d, dim=-1))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return h + self.o(a.transpose(1, 2).reshape(b, t, d))


class MLP(torch.nn.Module):
    def __init__(self, P):
        super().__init__()
        self.norm, self.gu, self.down, self.ffn = Norm(P["n2"]), Proj(P["gu"]), Proj(P["down"]), P["down"].shape[0]

    def forward(self, h):
        gate, up = self.gu(self.norm(h)).split(self.ffn, dim=-1)
        return h + self.down(torch.nn.functional.silu(gate) * up)


class Layer(torch.nn.Module):
    def __init__(self, P, heads):
        super().__init__()
        self.attn, self.mlp = Attn(P, heads), MLP(P)

    def forward(self, h):
        return self.mlp(self.attn(h))


class Decoder(torch.nn.Module):
    def __init__(self, weights, heads=16):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer(P, heads) for P in weights)

    def forward(self, h):
        for layer in self.layers:
            h = layer(h)
        return h


def hf_llama_model(layers: int, batch: int):
    """``transformers``' LlamaForCausalLM (random weights, bf16, SDPA, hidden 1024, FFN 2816, 16
    heads, 4 KV heads) on the GPU and its input of ``batch`` x 128 tokens: (model, input)."""
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=layers, num_attention_heads=16,
                         num_key_value_heads=4, vocab_size=32000, max_position_embeddings=512, use_cache=False)
    model = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, 128), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(1))
    return model, ids


def hf_llama(layers: int, batch: int):
    """:func:`hf_llama_model` and its input: (forward, input, module calls a forward)."""
    model, ids = hf_llama_model(layers, batch)
    calls = []
    hook = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: calls.append(m))
    with torch.no_grad():
        model(ids)
    hook.remove()
    return (lambda t: model(t).logits), ids, len(calls)


def toy(layers: int, batch: int):
    """The decoder above (tests/gpu/blocks.py's weights) and its input: (forward, input, module
    calls a forward)."""
    model = Decoder(decoder_weights(layers))
    x = torch.randn(batch, 128, 1024, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
    return model, x.to(torch.bfloat16), 1 + 9 * layers


MODELS = {"toy": toy, "hf-llama": hf_llama}


def capture_once(model, x, pool, parts=None, cpu=None):
    """One capture of ``model(x)``: (seconds, graph, output); with ``parts`` (a list), its
    begin (``torch.cuda.graph``'s entry), body (the forward) and end (exit and synchronize) in ms
    appended to it (the ``with`` statement's steps called one by one, for every capture); with
    ``cpu`` (a list), the capturing thread's CPU time from the entry to the exit in ms (the
    synchronize left out: it may spin), which time taken from this thread by other processes does
    not inflate."""
    parts = [] if parts is None else parts
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    c0 = time.thread_time()
    t0 = time.perf_counter()
    cm = torch.cuda.graph(g, pool=pool)
    cm.__enter__()
    t1 = time.perf_counter()
    try:
        out = model(x)
    except BaseException:
        cm.__exit__(*sys.exc_info())
        raise
    t2 = time.perf_counter()
    cm.__exit__(None, None, None)
    if cpu is not None:
        cpu.append((time.thread_time() - c0) * 1e3)
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    parts.append([(t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3])
    return t3 - t0, g, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--out")
    ap.add_argument("--model", choices=sorted(MODELS), default="toy")
    ap.add_argument("--arm", choices=ONE_ARMS,
                    help="fresh-process mode: only this arm, --captures times, in this process (JSON line)")
    ap.add_argument("--captures", type=int, default=4)
    ap.add_argument("--batches", type=int, nargs="+",
                    help="fresh-process mode: one graph per batch size, in this order, into one pool (as a "
                         "serving runner captures; overrides --captures and --batch)")
    ap.add_argument("--gc-off", action="store_true", help="fresh-process mode: the GC off during the captures")
    ap.add_argument("--plain-detached", action="store_true",
                    help="CUPTI detached before every plain capture and initialised again (untimed) before "
                         "every other arm's: the plain arm as in a process that never initialised CUPTI")
    ap.add_argument("--settle", action="store_true",
                    help="an untimed plain capture before every timed one (no arm pays for its place in the round)")
    args = ap.parse_args()
    if args.arm:
        return one_arm(args)
    if args.plain_detached:
        os.environ["PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS"] = "off"  # this script detaches, no timer
    model, x, calls = MODELS[args.model](args.layers, args.batch)
    cupti_state = _CuptiState() if args.plain_detached else None
    with torch.no_grad():
        warmup(lambda: model(x))
        arms = ("plain", "instrumented", "modules", "modules_driver")
        if cupti_state is not None:
            arms += ("plain_cupti", "plain_watch")
        secs = {a: [] for a in arms}
        ratios = {a: [] for a in arms[1:]}
        equal, scoped = [], None
        pool = None
        for r in range(args.rounds):
            outs = {}
            for arm in (arms if r % 2 == 0 else arms[::-1]):
                if cupti_state is not None:
                    cupti_state.set(arm != "plain")
                if args.settle:
                    capture_once(model, x, pool)
                if arm in ("plain", "plain_cupti"):
                    t, g, out = capture_once(model, x, pool)
                elif arm == "plain_watch":
                    t, g, out = cupti_state.watched(lambda: capture_once(model, x, pool))
                else:
                    os.environ["PERFETTO_GRAPH_ANN_NODE_WATCH"] = "0" if arm == "modules_driver" else "1"
                    with pga.instrument(modules=arm.startswith("modules"), calibrate=False):
                        t, g, out = capture_once(model, x, pool)
                    if arm == "modules" and scoped is None:
                        g.replay()  # binds the executable graph: its record is built
                        rec = REGISTRY.records()[-1]
                        scoped = sum(1 for n in rec.nodes if n.annotation.get("module"))
                pool = g.pool() if pool is None else pool
                secs[arm].append(t)
                outs[arm] = (g, out)
            for arm in arms[1:]:
                ratios[arm].append(secs[arm][-1] / secs["plain"][-1])
            for g, _ in outs.values():
                g.replay()
            torch.cuda.synchronize()
            equal.append(all(torch.equal(outs["plain"][1], outs[a][1]) for a in arms[1:]))
            del outs
    med = statistics.median
    rep = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "capture_path": fastpath.describe(),
           "model": args.model, "layers": args.layers, "batch": args.batch, "rounds": args.rounds,
           "module_calls_per_forward": calls,
           "capture_ms_median": {a: med(v) * 1e3 for a, v in secs.items()},
           "ratio_pairs_median": {a: med(v) for a, v in ratios.items()},
           "ratio_of_medians": {a: med(secs[a]) / med(secs["plain"]) for a in arms[1:]},
           "outputs_bitwise_equal_after_replay": all(equal), "scoped_nodes": scoped,
           "node_watch_refused": nodewatch.WATCH.refused,
           "plain_detached": None if cupti_state is None else cupti_state.report(), "settle": args.settle}
    print(json.dumps(rep, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(rep, raw=secs), f, indent=1)


class _CuptiState:
    """CUPTI initialised or detached between captures, untimed (``probe_util.CuptiSwitch``)."""

    def __init__(self) -> None:
        from probe_util import CuptiSwitch

        self.switch = CuptiSwitch()
        self.on = None
        self.inits, self.detaches, self.failed = 0, 0, []

    def set(self, on: bool) -> None:
        torch.cuda.synchronize()
        if on and self.on is not True:
            rc, self.inits = self.switch.init(), self.inits + 1
        elif not on and self.on is not False:
            rc, self.detaches = self.switch.detach(), self.detaches + 1
        else:
            rc = 0
        if rc:
            self.failed.append(("init" if on else "detach", rc))
        nodewatch.WATCH.attached = nodewatch.WATCH.warmed = on
        self.on = on

    def watched(self, capture):
        """``capture()`` with the node watch subscribed around it (subscribed untimed before;
        CUPTI initialised already), as a capture with module scopes holds it."""
        fns = self.switch.watch_fns
        token = nodewatch.WATCH.acquire(fns, lambda: None)
        if token is None:
            self.failed.append(("watch", nodewatch.WATCH.refused))
        try:
            return capture()
        finally:
            if token is not None:
                nodewatch.WATCH.release(token)

    def report(self) -> dict:
        return {"inits": self.inits, "detaches": self.detaches, "failed": self.failed}


#: fresh-process arms: ``plain_cupti`` is a plain process that initialises CUPTI as the warm-up
#: does (subscribe and unsubscribe once CUDA started, nothing else): what CUPTI alone costs captures;
#: ``*_cold``: the instrumentation with ``PERFETTO_GRAPH_ANN_WARM_CUPTI=0``
ONE_ARMS = ("plain", "plain_cupti", "instrumented", "instrumented_cold", "modules", "modules_cold")


def _cupti_only() -> bool:
    """Initialise CUPTI in this uninstrumented process the way ``instrument()``'s warm-up does."""
    from perfetto_graph_ann.capture import backends

    backend = backends.active()
    fns = backend.node_watch_functions() if backend is not None else None
    return fns is not None and nodewatch.WATCH.warm_up(fns)


def one_arm(args) -> None:
    """One arm in this process, as a program would see it: the instrumentation installed before
    the model is built (``perfetto-graph-ann run`` installs it at interpreter start), then
    ``--captures`` captures of one pool (or one per ``--batches`` size); prints each capture's
    time (the first pays what a process pays once: CUPTI's first subscription, the module paths,
    cold caches)."""
    if args.arm.endswith("_cold"):  # CUPTI initialised by the first capture, as before session 16
        os.environ["PERFETTO_GRAPH_ANN_WARM_CUPTI"] = "0"
    if not args.arm.startswith("plain"):
        pga.instrument(modules=args.arm.startswith("modules"), calibrate=False)
    naming = _RootNaming()
    batches = args.batches or [args.batch] * args.captures
    gen = torch.Generator(device="cuda").manual_seed(1)
    if args.model == "hf-llama":
        model, _ = hf_llama_model(args.layers, 1)
        xs = {b: torch.randint(0, model.config.vocab_size, (b, 128), device="cuda", generator=gen)
              for b in sorted(set(batches))}
    else:
        model = Decoder(decoder_weights(args.layers))
        xs = {b: torch.randn(b, 128, 1024, device="cuda", generator=gen).to(torch.bfloat16)
              for b in sorted(set(batches))}
    if args.arm == "plain_cupti" and not _cupti_only():
        raise SystemExit("plain_cupti: CUPTI could not be initialised")
    times, cpu, root_ms, parts, pool, graphs = [], [], [], [], None, []
    with torch.no_grad():
        for b in batches:
            warmup(lambda: model(xs[b]))
        if args.gc_off:
            gc.collect()
            gc.disable()
        for b in batches:
            naming.spent = 0.0
            t, g, _ = capture_once(model, xs[b], pool, parts, cpu)
            pool = g.pool() if pool is None else pool
            graphs.append(g)
            times.append(t * 1e3)
            root_ms.append(naming.spent * 1e3)

    print(json.dumps({"arm": args.arm, "model": args.model, "batches": batches, "capture_ms": times,
                      "capture_cpu_ms": cpu, "root_naming_ms": root_ms, "parts_ms": parts,
                      "gc_objects": len(gc.get_objects()), "cupti_warmed": nodewatch.WATCH.warmed}))


class _RootNaming:
    """Times what a capture spends naming its roots (``modules.model_of``: the modules on the
    stack and the collector's scans of :mod:`owners`; ``add_root``: the model's
    ``named_modules``), so a fresh process's first capture can be read without it. Wraps the
    two by attribute, as ``modules`` looks them up at each call."""

    def __init__(self) -> None:
        from perfetto_graph_ann.capture import modules

        self.spent = 0.0
        modules.model_of = self._timed(modules.model_of)
        cls = type(modules.NAMES)
        cls.add_root = self._timed(cls.add_root)

    def _timed(self, fn):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent += time.perf_counter() - t0
        return timed


if __name__ == "__main__":
    main()
