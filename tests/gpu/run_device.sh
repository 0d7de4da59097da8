#!/bin/bash
# Everything GPU for the capture stage in one device call (see tests/gpu/RESULTS.md).
# Usage on the GPU machine, from the repo root, with the wheels in .whl/ (cupti-python
# 13.0.1, perfetto 0.59.1, msgspec; cp312):  bash tests/gpu/run_device.sh
# ISOLATE=1 runs every test in its own process (one failed capture cannot cascade).
# The tests run with PERFETTO_GRAPH_ANN_VERIFY_SCOPES=1: every scope edge also lists the graph
# and checks that node listings only grow by appending (what count-based scopes rely on), and
# the deferred node table read from the graph's copy is compared with the template's.
# The benchmark and the probe run without it (the real, unverified path).
set -o pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/res"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=$PWD:/tmp/site
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch, google.protobuf as p; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "protobuf", p.__version__)'; } 2>&1 | tee "$OUT/env.txt"
if [ -n "$ISOLATE" ]; then
  UNITS=$(python3 -m pytest tests/gpu -o addopts= -m "gpu or multigpu" -p no:cacheprovider --collect-only -q 2>/dev/null | grep '::')
else
  UNITS="tests/gpu/test_capture_gpu.py tests/gpu/test_export_gpu.py tests/gpu/test_scopes_gpu.py tests/gpu/test_multigpu.py tests/gpu/test_trace_handler_gpu.py tests/gpu/test_readme_gpu.py"
fi
i=0
for u in $UNITS; do
  i=$((i+1))
  PERFETTO_GRAPH_ANN_VERIFY_SCOPES=1 PGA_GPU_RESULTS=$OUT/res/$i.json timeout 300 python3 -m pytest "$u" -o addopts="" -m "gpu or multigpu" -p no:cacheprovider -v -s --timeout 240 >> "$OUT/pytest.log" 2>&1
  echo "$u: exit $?"
done
grep -E "(PASSED|FAILED|ERROR|SKIPPED)( |$)" "$OUT/pytest.log" | grep "::" | sed -E 's/^(tests\S+::\S+).*(PASSED|FAILED|ERROR|SKIPPED).*/\1 \2/' | sort | uniq
grep -E "^FAILED|^ERROR|^E  " "$OUT/pytest.log" | head -30
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]; merged = {}
for f in sorted(glob.glob(os.path.join(out, "res", "*.json"))):
    merged.update(json.load(open(f)))
json.dump(merged, open(os.path.join(out, "gpu_results.json"), "w"), indent=1, sort_keys=True, default=str)
PY
rm -rf "$OUT/res"
timeout 120 python3 benchmarks/gpu/probe_capture_cost.py --out "$OUT/probe_capture_cost.json" > "$OUT/probe.log" 2>&1; echo "probe exit: $?"
timeout 100 python3 benchmarks/capture.py --out "$OUT/bench_capture.json" > "$OUT/bench.log" 2>&1; echo "bench exit: $?"
timeout 150 python3 benchmarks/capture.py --layers 8 --out "$OUT/bench_capture_8layers.json" >> "$OUT/bench.log" 2>&1; echo "bench 8 layers exit: $?"
python3 -c "
import json
for f in ('$OUT/bench_capture.json', '$OUT/bench_capture_8layers.json'):
    try: d = json.load(open(f))
    except Exception as e: print(f, e); continue
    print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items() if not k.endswith('_all')})
"
