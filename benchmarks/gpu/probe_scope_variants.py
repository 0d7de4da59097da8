"""Per-scope cost inside the real seed-block capture: where does a mark_kernels scope's time go? (probe)"""
import json, os, statistics, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "gpu"), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests")]
import torch  # noqa: E402
import perfetto_graph_ann as pga  # noqa: E402
from blocks import seed_block, warmup  # noqa: E402
from probe_util import CountOnlyScope as CountOnly, NoopScope as Noop  # noqa: E402
from perfetto_graph_ann.capture import backends  # noqa: E402
from perfetto_graph_ann.capture import session as S  # noqa: E402

be = backends.active()
real = pga.mark_kernels


class Lean:
    """mark_kernels' bookkeeping written inline: one class, no helper calls (what is the floor?)."""
    __slots__ = ("f", "r", "t")

    def __init__(self, ann, *, backward=True):  # mark_kernels's signature
        self.f = {"name": ann} if type(ann) is str else dict(ann)

    def __enter__(self):
        st = getattr(S._local, "stack", None)
        sess = st[-1] if st else (S._global[-1] if S._global else None)
        self.r = None
        if sess is not None and sess.recorder.active:
            r = self.r = sess.recorder
            self.t = (next(r._seq), self.f, r._count())
        return self

    def __exit__(self, *a):
        r = self.r
        if r is not None:
            t = self.t
            r.closed.append((t[0], t[1], t[2], r._count()))


OUT = {}
for layers in (1, 8):
    plain = seed_block(annotate=False, layers=layers)
    ann = seed_block(annotate=True, layers=layers)
    warmup(plain)
    warmup(ann)
    times = {}
    for _ in range(40):
        for label in ("none", "noop", "count_only", "real_count_stubbed", "real", "lean"):
            fn = plain if label == "none" else ann
            pga.mark_kernels = {"noop": Noop, "count_only": CountOnly, "lean": Lean}.get(label, real)
            g = torch.cuda.CUDAGraph()
            torch.cuda.synchronize()
            with pga.graph(g, calibrate=False):
                sess = S.current()
                if label == "real_count_stubbed":
                    sess.recorder.set_counter(lambda: 0)
                t0 = time.perf_counter()
                fn()
                times.setdefault(label, []).append(time.perf_counter() - t0)
            pga.mark_kernels = real
            torch.cuda.synchronize()
            g.reset()
    res = {k: round(statistics.median(v) * 1e6, 1) for k, v in times.items()}
    scopes = 4 * layers
    res["per_scope_us"] = {k: round((res[k] - res["noop"]) / scopes, 2) for k in ("count_only", "real_count_stubbed", "real", "lean")}
    OUT[layers] = res
    print(layers, res, flush=True)
print(json.dumps(OUT))
