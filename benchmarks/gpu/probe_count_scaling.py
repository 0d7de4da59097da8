"""Does a node count / capture-info query cost grow with the graph under capture? (probe)"""
import json, os, sys, ctypes
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "gpu"), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests")]
from probe_util import per_call_us  # noqa: E402
import torch
import perfetto_graph_ann as pga
from perfetto_graph_ann.capture import backends
from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.capture.registry import REGISTRY
def per_call(fn, n=200):
    return per_call_us(fn, n, rounds=5)
torch.zeros(1, device="cuda")
be = backends.active()
x = torch.randn(64, 64, device="cuda"); torch.add(x, 1); torch.cuda.synchronize()
OUT = {}
g = torch.cuda.CUDAGraph()
inner = torch.cuda.graph(g)
inner.__enter__()
cs = int(inner.capture_stream.cuda_stream)
torch.add(x, 1)
graph = be.capture_graph(cs)
sess = S.CaptureSession(be, cs, REGISTRY, owner=1, device=0); sess.start(); S.push(sess)
cu = be._cu
status, gh, deps, nd = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_size_t()
def capinfo():
    be._capture_info(cs, ctypes.byref(status), None, ctypes.byref(gh), ctypes.byref(deps), ctypes.byref(nd))
for target in (16, 256, 1024, 4096, 8192):
    while be.node_count(graph) < target:
        torch.add(x, 1)
    row = {"nodes": be.node_count(graph)}
    row["count_idle"] = per_call(lambda: be.node_count(graph))
    row["capinfo_idle"] = per_call(capinfo)
    row["add"] = per_call(lambda: torch.add(x, 1), 50)
    row["add+count"] = per_call(lambda: (torch.add(x, 1), be.node_count(graph)), 50)
    row["add+capinfo"] = per_call(lambda: (torch.add(x, 1), capinfo()), 50)
    def sc():
        with pga.mark_kernels("x", backward=False):
            pass
    row["scope_empty"] = per_call(sc, 50)
    def sca():
        with pga.mark_kernels("x", backward=False):
            torch.add(x, 1)
    row["scope+add"] = per_call(sca, 50)
    print(row, flush=True)
    OUT[target] = row
S.pop(sess)
inner.__exit__(None, None, None)
print(json.dumps(OUT))
