"""Where a mark_kernels scope's time goes on the GPU host: Python vs driver (probe)."""
import cProfile, io, json, os, pstats, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "gpu"), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests")]
from probe_util import per_call_us  # noqa: E402
import torch
import perfetto_graph_ann as pga
from perfetto_graph_ann.capture import backends
from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.capture.registry import REGISTRY
from support.capture_fakes import FakeCuda
def per_call(fn, n=500):
    return per_call_us(fn, n, rounds=7)
def scope():
    with pga.mark_kernels("x", backward=False):
        pass
OUT = {}
fake = FakeCuda()
with backends.use(fake):
    fg = fake.begin_capture(0x70)
    s = S.CaptureSession(fake, 0x70, REGISTRY, owner=99, device=0); s.start(); S.push(s)
    OUT["scope fake backend"] = per_call(scope)
    OUT["fake node_count"] = per_call(lambda: fake.node_count(fg))
    S.pop(s)
torch.zeros(1, device="cuda")
be = backends.active()
x = torch.randn(64, 64, device="cuda"); torch.add(x, 1); torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
inner = torch.cuda.graph(g); inner.__enter__()
cs = int(inner.capture_stream.cuda_stream)
torch.add(x, 1)
sess = S.CaptureSession(be, cs, REGISTRY, owner=1, device=0); sess.start(); S.push(sess)
graph = sess.graph
OUT["real node_count idle"] = per_call(lambda: be.node_count(graph))
OUT["scope real backend"] = per_call(scope)
OUT["scope real, count stubbed"] = None
orig = sess.recorder._count
sess.recorder._count = lambda: 1
OUT["scope real, count stubbed"] = per_call(scope)
sess.recorder._count = orig
pr = cProfile.Profile(); pr.enable()
for _ in range(2000): scope()
pr.disable()
st = io.StringIO(); pstats.Stats(pr, stream=st).sort_stats("tottime").print_stats(12)
S.pop(sess); inner.__exit__(None, None, None)
print(json.dumps(OUT, indent=1)); print(st.getvalue())
