"""Per-call costs of pga.graph's fixed steps on the GPU host (probe, prints JSON)."""
import json, os, sys, threading
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "gpu"), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests")]
from probe_util import per_call_us  # noqa: E402
import torch
import perfetto_graph_ann as pga
from perfetto_graph_ann.capture import backends, api, collectives
from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.capture.registry import REGISTRY
from perfetto_graph_ann.capture.scopes import ScopeRecorder
OUT = {}
def per_call(fn, n=2000):
    return per_call_us(fn, n, rounds=5)
torch.cuda.init(); torch.zeros(1, device="cuda")
be = backends.active()
OUT["threading.local"] = per_call(threading.local)
OUT["RLock"] = per_call(threading.RLock)
OUT["ScopeRecorder"] = per_call(lambda: ScopeRecorder(lambda: 0))
OUT["CaptureSession"] = per_call(lambda: S.CaptureSession(be, 0, REGISTRY, owner=1, device=0))
OUT["verify_from_env"] = per_call(S.verify_from_env)
OUT["selected_name+active"] = per_call(lambda: (backends.selected_name(), backends.active()))
OUT["install+uninstall"] = per_call(lambda: (collectives.install(), collectives.uninstall()))
OUT["current_device"] = per_call(torch.cuda.current_device)
g = torch.cuda.CUDAGraph()
OUT["owner_fresh_graph"] = per_call(lambda: api._owner(torch.cuda.CUDAGraph()), 500)
OUT["CUDAGraph()"] = per_call(torch.cuda.CUDAGraph, 500)
OUT["torch.cuda.graph ctor"] = per_call(lambda: torch.cuda.graph(g), 500)
s = torch.cuda.Stream()
OUT["stream.cuda_stream"] = per_call(lambda: int(s.cuda_stream))
x = torch.randn(256, 256, device="cuda"); y = x @ x; torch.add(x, 1); torch.cuda.synchronize()
# inside a live capture
g = torch.cuda.CUDAGraph()
inner = torch.cuda.graph(g)
inner.__enter__()
cs = int(inner.capture_stream.cuda_stream)
for _ in range(8): y = x @ x
graph = be.capture_graph(cs)
OUT["capture_graph (no new nodes)"] = per_call(lambda: be.capture_graph(cs), 500)
OUT["node_count (no new nodes)"] = per_call(lambda: be.node_count(graph), 500)
OUT["graph_id"] = per_call(lambda: be.graph_id(graph), 500)
def clone():
    c = be.clone_graph(graph); be.destroy_graph(c)
OUT["clone+destroy (%d nodes)" % be.node_count(graph)] = per_call(clone, 50)
def launch_count():
    torch.add(x, 1); be.node_count(graph)
def launch_only():
    torch.add(x, 1)
OUT["launch add"] = per_call(launch_only, 200)
OUT["launch add + node_count"] = per_call(launch_count, 200)
sess = S.CaptureSession(be, cs, REGISTRY, owner=1, device=0)
sess.start()
S.push(sess)
def scope():
    with pga.mark_kernels("x", backward=False):
        pass
OUT["mark_kernels no nodes"] = per_call(scope, 500)
def scope_add():
    with pga.mark_kernels("x", backward=False):
        torch.add(x, 1)
OUT["mark_kernels + add"] = per_call(scope_add, 200)
OUT["push+pop"] = per_call(lambda: (S.push(sess), S.pop(sess)))
S.pop(sess)
inner.__exit__(None, None, None)
OUT["exec_id"] = per_call(lambda: be.exec_id(g.raw_cuda_graph_exec()) if hasattr(g, "raw_cuda_graph_exec") else 0, 500)
OUT["_exec_handle"] = per_call(lambda: api._exec_handle(g), 500)
print(json.dumps(OUT, indent=1))
