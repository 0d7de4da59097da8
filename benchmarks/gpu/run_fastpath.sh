#!/bin/bash
# The compiled capture path on the GPU machine, one device call (tests/gpu/RESULTS.md):
# the GPU tests with verify on (pure-Python recorder, every edge listed) and off (compiled
# recorder), the live demo, the capture benchmark with the pure-Python path as a third interleaved arm,
# and the fixed-step probe. Needs .whl/ (as run_device.sh) and the cp312 extension built
# here with `python3.12 hatch_build.py` and carried (it is git-ignored).
set -o pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=$PWD:/tmp/site
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; command -v gcc cc
  python3 -c 'import sysconfig, os; p = sysconfig.get_paths()["include"]; print(p, "Python.h:", os.path.exists(p + "/Python.h"))'
  python3 -c 'from perfetto_graph_ann.capture import fastpath; print("capture path:", fastpath.describe())'; } 2>&1 | tee "$OUT/env.txt"
# each file in its own process; multi-GPU only where there are 2 GPUs (kind nvidia-h200-x2)
FILES="tests/gpu/test_capture_gpu.py tests/gpu/test_export_gpu.py"
[ "$(nvidia-smi -L | wc -l)" -ge 2 ] && FILES="$FILES tests/gpu/test_multigpu.py"
for f in $FILES; do for v in 1 0; do
  log="$OUT/pytest_$(basename "$f" .py)_verify$v.log"
  PERFETTO_GRAPH_ANN_VERIFY_SCOPES=$v timeout 300 python3 -m pytest "$f" -o addopts="" -m "gpu or multigpu" \
    -p no:cacheprovider -q --timeout 240 > "$log" 2>&1
  echo "$f verify=$v: exit $? $(tail -1 "$log")"
done; done
# the compiled marker path on every edge (markers from 0 nodes), verify off
PERFETTO_GRAPH_ANN_MARKERS_FROM=0 PERFETTO_GRAPH_ANN_VERIFY_SCOPES=0 timeout 300 python3 -m pytest tests/gpu/test_capture_gpu.py \
  -o addopts="" -m gpu -p no:cacheprovider -q --timeout 240 > "$OUT/pytest_markers0.log" 2>&1
echo "test_capture_gpu.py markers at every edge, verify=0: exit $? $(tail -1 "$OUT/pytest_markers0.log")"
timeout 200 python3 -m pytest tests/test_demo.py -k live -o addopts="" -p no:cacheprovider -q > "$OUT/pytest_demo_live.log" 2>&1
echo "live demo: exit $? $(tail -1 "$OUT/pytest_demo_live.log")"
timeout 150 python3 benchmarks/capture.py --python-arm --captures ${CAPTURES:-60} --out "$OUT/bench1.json" > "$OUT/bench.log" 2>&1; echo "bench exit: $?"
timeout 150 python3 benchmarks/capture.py --python-arm --capture-only --layers 8 --captures 40 --out "$OUT/bench8.json" >> "$OUT/bench.log" 2>&1; echo "bench 8 exit: $?"
for L in ${LARGE:-}; do  # e.g. LARGE="32 128 256": large graphs (markers from 512 nodes by default)
  timeout 150 python3 benchmarks/capture.py --python-arm --capture-only --layers $L --captures 15 --out "$OUT/bench_L$L.json" >> "$OUT/bench.log" 2>&1
  echo "bench $L layers exit: $?"
done
timeout 120 python3 benchmarks/gpu/probe_fixed_steps.py --captures 30 > "$OUT/steps.json" 2>&1; echo "steps exit: $?"
python3 - "$OUT" <<'PY'
import json, sys
import glob, os
for f in ["bench1.json", "bench8.json"] + sorted(os.path.basename(p) for p in glob.glob(f"{sys.argv[1]}/bench_L*.json")):
    try:
        d = json.load(open(f"{sys.argv[1]}/{f}"))
    except Exception as e:
        print(f, e); continue
    print(f, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items() if not k.endswith("_all")})
try:
    for k, v in json.load(open(f"{sys.argv[1]}/steps.json")).items():
        if isinstance(v, dict):
            print("steps", k, {x: v[x] for x in ("plain", "pga, no scopes", "pga, scopes", "fixed pct", "total pct")},
                  v["steps_us_per_capture_mean"])
except Exception as e:
    print("steps.json", e)
PY
