#!/bin/bash
# Every GPU test file in one device call, on the compiled capture path (built there first),
# each file in its own process with its own time limit; logs under $OUT. Needs .whl/ as
# run_device.sh (cupti-python, perfetto, msgspec for cp312). Usage: bash tests/gpu/run_all.sh
set -o pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=$PWD:/tmp/site
# transformers and its dependencies (test_hf_models_gpu alone) apart, so they never shadow the machine's own
[ -d .whl/hf ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site-hf .whl/hf/*.whl
python3 hatch_build.py > /dev/null 2>&1 || echo "extension build failed: pure-Python capture path"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'
  python3 -c 'from perfetto_graph_ann.capture import fastpath; print("capture path:", fastpath.describe())'; } 2>&1 | tee "$OUT/env.txt"
ALL="test_capture_gpu test_calibration_gpu test_backward_truth_gpu test_scopes_gpu test_export_gpu
  test_trace_handler_gpu test_readme_gpu test_critical_path_gpu test_node_watch_gpu test_cupti_warm_gpu
  test_cupti_detach_gpu test_cupti_ids_gpu test_zero_code_gpu test_hf_models_gpu test_replay_identity_gpu
  test_copy_nodes_gpu test_multigpu test_fleet_gpu"
for f in ${FILES:-$ALL}; do
  log="$OUT/$f.log"
  extra=""; [ "$f" = test_hf_models_gpu ] && extra=":/tmp/site-hf"
  PYTHONPATH="$PYTHONPATH$extra" PGA_GPU_RESULTS="$OUT/results_$f.json" PGA_CP_OUT="$OUT/cp" \
  timeout ${PER_FILE_S:-150} python3 -m pytest "tests/gpu/$f.py" -o addopts="" -m "gpu or multigpu" -p no:cacheprovider \
    -q -rfEs --timeout 140 > "$log" 2>&1
  echo "$f: exit $? | $(tail -1 "$log")"
done
# the backward-tagging capture cost (a timing, not a test: moved out of test_backward_truth_gpu)
timeout ${PER_FILE_S:-150} python3 benchmarks/backward_capture_gpu.py --out "$OUT/bench_backward_capture.json" \
  > "$OUT/bench_backward_capture.log" 2>&1; echo "benchmarks/backward_capture_gpu.py: exit $?"
grep -hE "^(FAILED|ERROR)|^E  " "$OUT"/*.log | head -40
