import json, threading, collections, torch, os
from torch.profiler import profile, ProfilerActivity
x = torch.randn(64, 256, device="cuda"); w = torch.randn(256, 256, device="cuda")
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s): y = x @ w
torch.cuda.current_stream().wait_stream(s)
with torch.cuda.graph(g): y = x @ w
g.replay(); torch.cuda.synchronize()
ids = {}
def worker(k):
    ids[k] = (threading.get_native_id(), threading.get_ident(), threading.get_ident() & 0xFFFFFFFF)
    for _ in range(5): g.replay()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    ids["main"] = (threading.get_native_id(), threading.get_ident(), threading.get_ident() & 0xFFFFFFFF)
    g.replay()
    ts = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
    [t.start() for t in ts]; [t.join() for t in ts]
    torch.cuda.synchronize()
prof.export_chrome_trace("/tmp/t.json")
d = json.load(open("/tmp/t.json"))
c = collections.Counter((e.get("pid"), e.get("tid"), e.get("name")) for e in d["traceEvents"] if e.get("cat") == "cuda_runtime")
print("ids", ids, "pid", os.getpid())
print("runtime", c)
print("meta", [ (e["tid"], e["args"]) for e in d["traceEvents"] if e.get("ph") == "M" and e.get("name") in ("thread_name", "thread_sort_index")][:12])
