# session 37: fresh-process capture cost, a runner's batch sizes, the roots' naming timed apart
set -o pipefail
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .whl/hf/*.whl || exit 3
export PYTHONPATH=$PWD:/tmp/site
python3 hatch_build.py > "$OUT/build.log" 2>&1 || echo "build failed"
python3 -m compileall -q -j 0 perfetto_graph_ann > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; uptime
date -u +%H:%M:%S
timeout 60 python3 benchmarks/module_owners.py --rounds 5 2>&1 | grep -v Warn
date -u +%H:%M:%S
timeout 280 python3 benchmarks/gpu/module_capture_fresh.py --rounds 8 --batches 32 24 16 8 4 2 1 --arms plain instrumented modules --out $OUT/fresh_toy.json > $OUT/fresh_toy.log 2>&1; echo "toy exit $?"; cat $OUT/fresh_toy.log | head -80
date -u +%H:%M:%S
timeout 250 python3 benchmarks/gpu/module_capture_fresh.py --model hf-llama --rounds 6 --batches 16 8 4 2 1 --arms plain modules --out $OUT/fresh_hf.json > $OUT/fresh_hf.log 2>&1; echo "hf exit $?"; cat $OUT/fresh_hf.log | head -80
date -u +%H:%M:%S
