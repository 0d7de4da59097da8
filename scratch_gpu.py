import cProfile, gzip, os, pstats, sys, time, tempfile, io
ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [ROOT, ROOT + "/tests/gpu", ROOT + "/benchmarks/gpu", ROOT + "/benchmarks"]
import torch
import perfetto_graph_ann as pga
from blocks import capture, decoder, decoder_weights
from export_pace import _profile
from perfetto_graph_ann.annotations.files import save_annotations
from perfetto_graph_ann.capture.recorded import recorded_annotations
out = os.environ["OUT"]
g, _ = capture(decoder(decoder_weights(36)))
g.replay(); torch.cuda.synchronize()
_profile(torch, g, 2)
for n in (100, 20):
    prof = _profile(torch, g, n)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "t.json")
        t = time.perf_counter(); prof.export_chrome_trace(src); print("torch export", n, time.perf_counter() - t)
        with open(src, "rb") as f, gzip.open(os.path.join(out, f"t{n}.json.gz"), "wb", compresslevel=3) as z:
            z.write(f.read())
save_annotations(os.path.join(out, "t.annotations.json"), recorded_annotations())
for r in range(2):
    prof = _profile(torch, g, 100)
    pr = cProfile.Profile()
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        pr.enable()
        pga.export(prof, os.path.join(tmp, "x.pftrace"), graph_lanes="all")
        pr.disable()
        print("pga.export under cProfile", time.perf_counter() - t)
    s = io.StringIO()
    ps = pstats.Stats(pr, stream=s); ps.sort_stats("tottime").print_stats(40); ps.sort_stats("cumulative").print_stats(60)
    if r == 1:
        print(s.getvalue())
for r in range(3):
    prof = _profile(torch, g, 100)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter(); prof.export_chrome_trace(os.path.join(tmp, "a.json")); a = time.perf_counter() - t
    prof = _profile(torch, g, 100)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter(); pga.export(prof, os.path.join(tmp, "x.pftrace"), graph_lanes="all"); b = time.perf_counter() - t
    print(f"torch {a:.3f} pga {b:.3f} ratio {b/a:.2f}")
