#!/bin/bash
# Everything GPU for the capture stage in one device call (see tests/gpu/RESULTS.md).
# Usage on the GPU machine, from the repo root, with the cupti-python wheel in .whl/:
#   bash tests/gpu/run_device.sh
# Each test runs in its own process so one failed capture cannot cascade into the next.
set -o pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=$PWD:/tmp/site
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch, google.protobuf as p; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "protobuf", p.__version__)'; } 2>&1 | tee "$OUT/env.txt"
mkdir -p "$OUT/res"
TESTS=$(python3 -m pytest tests/gpu -o addopts="" -m "gpu or multigpu" -p no:cacheprovider --collect-only -q 2>/dev/null | grep '::')
for t in $TESTS; do
  name=${t##*::}
  PGA_GPU_RESULTS=$OUT/res/$name.json timeout 300 python3 -m pytest "$t" -o addopts="" -m "gpu or multigpu" -p no:cacheprovider -v -s --timeout 240 2>&1 | tee -a "$OUT/pytest.log" | grep -E "PASSED|FAILED|ERROR|Error|error:|^E " | head -20
done
grep -E "^(tests/gpu/\S+ )?(PASSED|FAILED)|passed|failed" "$OUT/pytest.log" | tail -30
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]; merged = {}
for f in sorted(glob.glob(os.path.join(out, "res", "*.json"))):
    merged.update(json.load(open(f)))
json.dump(merged, open(os.path.join(out, "gpu_results.json"), "w"), indent=1, sort_keys=True, default=str)
PY
rm -rf "$OUT/res"
# the same tests in one process, in file order (several captures per process, as users do)
timeout 200 python3 -m pytest tests/gpu/test_capture_gpu.py -o addopts="" -m gpu -p no:cacheprovider -q --timeout 150 2>&1 | tail -n 30 > "$OUT/pytest_one_process.log"
echo "one process:"; tail -n 3 "$OUT/pytest_one_process.log"
timeout 100 python3 benchmarks/capture.py --out "$OUT/bench_capture.json" 2>&1 | tee "$OUT/bench.log"
echo "bench exit: $?"
timeout 150 python3 benchmarks/capture.py --layers 8 --out "$OUT/bench_capture_8layers.json" 2>&1 | tee -a "$OUT/bench.log"
echo "bench 8 layers exit: $?"
