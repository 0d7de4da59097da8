#!/bin/bash
# Issue 15's capture side on the GPU machine, one device call (tests/gpu/RESULTS.md): the
# GPU tests (compiled capture path, verify off; the calibration tests also with verify on),
# where a calibration's time goes (probe_calibration_cost.py), the decoder benchmark (36
# layers, batches 16,8,4,1 sharing a pool; and a ~1,000-node graph's first replay) and the
# seed block's capture benchmark. Needs .whl/ as run_device.sh; builds the cp312 extension.
set -o pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 hatch_build.py > "$OUT/build.log" 2>&1; echo "build exit: $?"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  python3 -c 'from perfetto_graph_ann.capture import fastpath; print("capture path:", fastpath.describe())'; } 2>&1 | tee "$OUT/env.txt"
for f in ${TESTS:-tests/gpu/test_calibration_gpu.py tests/gpu/test_capture_gpu.py tests/gpu/test_export_gpu.py}; do
  log="$OUT/pytest_$(basename "$f" .py).log"
  PERFETTO_GRAPH_ANN_VERIFY_SCOPES=0 PGA_GPU_RESULTS="$OUT/res_$(basename "$f" .py).json" timeout 200 python3 -m pytest "$f" \
    -o addopts="" -m gpu -p no:cacheprovider -q -s --timeout 180 > "$log" 2>&1
  echo "$f: exit $? $(tail -1 "$log")"
  grep -E "^(FAILED|ERROR)|^E  " "$log" | head -12
done
PERFETTO_GRAPH_ANN_VERIFY_SCOPES=1 timeout 150 python3 -m pytest tests/gpu/test_calibration_gpu.py -o addopts="" -m gpu \
  -p no:cacheprovider -q --timeout 140 > "$OUT/pytest_calibration_verify1.log" 2>&1
echo "test_calibration_gpu.py verify=1: exit $? $(tail -1 "$OUT/pytest_calibration_verify1.log")"
[ -z "$NO_PROBE" ] && { timeout 90 python3 tests/gpu/probe_calibration_cost.py --out "$OUT/probe_calibration.json" > "$OUT/probe_calibration.log" 2>&1; echo "probe exit: $?"; }
timeout 120 python3 benchmarks/capture.py --decoder --rounds ${ROUNDS:-8} --out "$OUT/bench_decoder.json" > "$OUT/bench_decoder.log" 2>&1; echo "decoder bench exit: $?"
timeout 60 python3 benchmarks/capture.py --decoder --layers 46 --batches 16 --rounds 8 --out "$OUT/bench_decoder1000.json" > "$OUT/bench_decoder1000.log" 2>&1; echo "1000-node bench exit: $?"
timeout 80 python3 benchmarks/capture.py --captures 40 --out "$OUT/bench_seed.json" > "$OUT/bench_seed.log" 2>&1; echo "seed bench exit: $?"
python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
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
    print("probe", json.dumps(d))
except Exception as e:
    print("probe_calibration.json", e)
PY
