#!/bin/bash
# Everything GPU for the capture stage in one device call (see tests/gpu/RESULTS.md).
# Usage on the GPU machine, from the repo root, with the cupti-python wheel in .whl/:
#   bash tests/gpu/run_device.sh
set -o pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=$PWD:/tmp/site
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch, google.protobuf as p; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "protobuf", p.__version__)'; } 2>&1 | tee "$OUT/env.txt"
PGA_GPU_RESULTS=$OUT/gpu_results.json timeout 420 python3 -m pytest tests/gpu -o addopts="" -m "gpu or multigpu" -p no:cacheprovider -v -s --timeout 300 2>&1 | tee "$OUT/pytest.log"
echo "pytest exit: $?"
timeout 150 python3 benchmarks/capture.py --out "$OUT/bench_capture.json" 2>&1 | tee "$OUT/bench.log"
echo "bench exit: $?"
