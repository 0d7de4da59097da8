#!/bin/bash
# Issue 15's capture side on the GPU machine, one device call (tests/gpu/RESULTS.md): where a
# calibration's time goes (probe_calibration_cost.py), the decoder benchmark (36 layers,
# batches 16,8,4,1 sharing a pool, with the pure-Python capture path as a third arm; and a
# ~1,000-node graph's first replay), the seed block's capture benchmark, and the GPU tests
# (compiled capture path, verify off; the calibration tests also with verify on).
# Needs .whl/ as run_device.sh; builds the cp312 extension. At most 8 files come back from
# $OUT: run.log (everything printed, failures included) and five JSON files.
set -o pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"; W=$(mktemp -d)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > >(tee "$OUT/run.log") 2>&1
python3 hatch_build.py > "$W/build.log" 2>&1; echo "build exit: $?"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
python3 -c 'from perfetto_graph_ann.capture import fastpath; print("capture path:", fastpath.describe())'
if [ -z "$NO_PROBE" ]; then
  timeout 90 python3 benchmarks/gpu/probe_calibration_cost.py --out "$OUT/probe_calibration.json" > "$W/probe.log" 2>&1
  echo "probe exit: $?"; tail -3 "$W/probe.log"
fi
timeout 150 python3 benchmarks/capture.py --decoder --python-arm --rounds ${ROUNDS:-8} --out "$OUT/bench_decoder.json" > "$W/bd.log" 2>&1
echo "decoder bench exit: $?"; grep -E "Error|error" "$W/bd.log" | tail -3
timeout 60 python3 benchmarks/capture.py --decoder --layers 46 --batches 16 --rounds 8 --out "$OUT/bench_decoder1000.json" > "$W/b1.log" 2>&1
echo "1000-node bench exit: $?"; grep -E "Error|error" "$W/b1.log" | tail -3
timeout 80 python3 benchmarks/capture.py --captures 40 --out "$OUT/bench_seed.json" > "$W/bs.log" 2>&1
echo "seed bench exit: $?"; grep -E "Error|error" "$W/bs.log" | tail -3
for f in ${TESTS:-tests/gpu/test_calibration_gpu.py tests/gpu/test_capture_gpu.py tests/gpu/test_export_gpu.py}; do
  b=$(basename "$f" .py)
  PERFETTO_GRAPH_ANN_VERIFY_SCOPES=0 PGA_GPU_RESULTS="$W/res_$b.json" timeout ${TEST_TIMEOUT:-100} python3 -m pytest "$f" \
    -o addopts="" -m gpu -p no:cacheprovider -q -s --timeout 90 -rA > "$W/$b.log" 2>&1
  echo "$f: exit $? $(tail -1 "$W/$b.log")"
  grep -E "^(PASSED|FAILED|ERROR) " "$W/$b.log"
  grep -E "^E  |Error" "$W/$b.log" | head -25
done
python3 - "$OUT" "$W" <<'PY'
import glob, json, os, sys
o, w = sys.argv[1], sys.argv[2]
merged = {}
for f in sorted(glob.glob(os.path.join(w, "res_*.json"))):
    merged.update(json.load(open(f)))
json.dump(merged, open(os.path.join(o, "gpu_results.json"), "w"), indent=1, sort_keys=True, default=str)
for f in ("bench_decoder.json", "bench_decoder1000.json"):
    try:
        d = json.load(open(f"{o}/{f}"))
    except Exception as e:
        print(f, e); continue
    print(f, json.dumps({k: v for k, v in d.items() if k != "raw"}))
try:
    d = json.load(open(f"{o}/bench_seed.json"))
    print("seed", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items() if not k.endswith("_all")})
except Exception as e:
    print("bench_seed.json", e)
try:
    d = json.load(open(f"{o}/probe_calibration.json"))
    print("probe direct", json.dumps(d.get("direct")), "full", json.dumps(d.get("full", {}).get("median_of_rest")))
except Exception as e:
    print("probe_calibration.json", e)
PY
PERFETTO_GRAPH_ANN_VERIFY_SCOPES=1 timeout 100 python3 -m pytest tests/gpu/test_calibration_gpu.py -o addopts="" -m gpu \
  -p no:cacheprovider -q --timeout 90 > "$W/v1.log" 2>&1
echo "test_calibration_gpu.py verify=1: exit $? $(tail -1 "$W/v1.log")"
grep -E "^E  " "$W/v1.log" | head -10
