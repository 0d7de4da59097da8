"""Can a scope edge learn the graph's next node id in O(1)? Probe an empty node (add, read id, destroy)."""
import ctypes, json, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "gpu"), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests")]
from probe_util import per_call_us  # noqa: E402
import torch
from perfetto_graph_ann.capture import backends
def per_call(fn, n=200):
    return per_call_us(fn, n, rounds=5)
torch.zeros(1, device="cuda")
be = backends.active()
cu = be._cu
cu.cuGraphAddEmptyNode.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
cu.cuGraphDestroyNode.argtypes = [ctypes.c_void_p]
x = torch.randn(64, 64, device="cuda"); torch.add(x, 1); torch.cuda.synchronize()
OUT = {}
def probe(graph):
    nd = ctypes.c_void_p()
    rc = cu.cuGraphAddEmptyNode(ctypes.byref(nd), graph, None, 0)
    if rc != 0:
        raise RuntimeError(f"cuGraphAddEmptyNode rc {rc}")
    return be.local_id(nd.value)  # cuGraphDestroyNode during capture: 401 (capture unsupported)
# correctness
side = torch.cuda.Stream()
g = torch.cuda.CUDAGraph()
inner = torch.cuda.graph(g); inner.__enter__()
cs = int(inner.capture_stream.cuda_stream)
graph = be.capture_graph(cs)
torch.add(x, 1)
try:
    p0 = probe(graph)
    for _ in range(3): torch.add(x, 1)
    p1 = probe(graph)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2): torch.add(x, 2)
    p2 = probe(graph)          # side work, main not joined yet
    torch.add(x, 3)
    p3 = probe(graph)
    torch.cuda.current_stream().wait_stream(side)
    torch.add(x, 4)
    p4 = probe(graph)
    OUT["probe_ids"] = [p0, p1, p2, p3, p4]
    OUT["count_at_end"] = be.node_count(graph)
    OUT["ok_capture"] = True
except Exception as e:
    OUT["error"] = repr(e)
inner.__exit__(None, None, None)
g.replay(); torch.cuda.synchronize()
OUT["replay_ok"] = True
# listing / ids after capture on a kept graph
g2 = torch.cuda.CUDAGraph(keep_graph=True)
with torch.cuda.graph(g2):
    torch.add(x, 1)
    gr = be.capture_graph(torch.cuda.current_stream().cuda_stream)
    ids = [probe(gr)]
    for _ in range(3): torch.add(x, 1)
    ids.append(probe(gr))
raw = g2.raw_cuda_graph()
lst = be.list_nodes(int(raw))
OUT["kept_graph_local_ids_in_listing_order"] = [be.local_id(n) for n in lst]
OUT["kept_graph_probe_ids"] = ids
c = be.clone_graph(int(raw)); OUT["clone_local_ids"] = [be.local_id(n) for n in be.list_nodes(c)]; be.destroy_graph(c)
g2.instantiate(); g2.replay(); torch.cuda.synchronize()
# costs vs size
g = torch.cuda.CUDAGraph()
inner = torch.cuda.graph(g); inner.__enter__()
graph = be.capture_graph(int(inner.capture_stream.cuda_stream))
rows = []
for target in (16, 1024, 4096, 8192):
    while be.node_count(graph) < target:
        torch.add(x, 1)
    n = be.node_count(graph)
    row = {"nodes": n, "count_idle": per_call(lambda: be.node_count(graph)), "probe_idle": per_call(lambda: probe(graph)),
           "add": per_call(lambda: torch.add(x, 1), 20), "add+probe": per_call(lambda: (torch.add(x, 1), probe(graph)), 20),
           "add+count": per_call(lambda: (torch.add(x, 1), be.node_count(graph)), 20)}
    rows.append(row); print(row, flush=True)
OUT["costs"] = rows
inner.__exit__(None, None, None)
t0 = time.perf_counter(); g.replay(); torch.cuda.synchronize(); OUT["big_replay_ok_s"] = time.perf_counter() - t0
def build(with_probes, n=1792, every=2):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gr = be.capture_graph(torch.cuda.current_stream().cuda_stream)
        for i in range(n):
            torch.add(x, 1)
            if with_probes and i % every == 0:
                probe(gr)
    return g
def replay_ms(g, n=100):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(5): g.replay()
    a.record()
    for _ in range(n): g.replay()
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) / n
gp, ge = build(False), build(True)
rp, re_ = [], []
for _ in range(5):
    rp.append(replay_ms(gp)); re_.append(replay_ms(ge))
OUT["replay_ms_plain"] = rp; OUT["replay_ms_with_896_empty_nodes"] = re_
print(json.dumps(OUT))
