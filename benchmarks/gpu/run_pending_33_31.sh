#!/bin/bash
# What issues 33 and 31 still need measured on the GPU machine, in one device call each step
# list: the export's pace against torch's on small profiles (export_pace), the first export in
# a process (first_export: session 35's writer without the perfetto.protos classes, on that
# host's slower Python), the per-graph caches and the C template on the recorded profiles
# (graph_derived, template_runs: need .bench-data/, recorded there by
# benchmarks/gpu/record_export_trace.py and carried), and issue 31's module-scope capture cost
# in parts (capture_parts; hf_capture_parts: on transformers' LlamaForCausalLM, whose module calls
# seemed to cost ~4x the toy decoder's in session 20; ~2.9 us each, as the toy's, in session 36).
# Needs .whl/ (cupti-python, msgspec, perfetto for cp312), as run_fastpath.sh; hf_capture_parts also .whl/hf/ (transformers 5.24.0 and its
# dependencies as cp312 wheels, numpy left out: the GPU machine has it). Issue 31 in fresh
# processes, a runner's seven batch sizes a process (the root's naming and each capture's parts
# apart): fresh_runner (with plain_cupti: CUPTI's own share; ~8 s a process there, so ROUNDS=6
# fits) and fresh_hf (transformers' Llama, ~20 s a process: ROUNDS=3); on a host whose plain
# processes vary 2x round to round (session 38) they need far more rounds than fit a call.
# headline: issue 31's limit in one process, plain captures with CUPTI detached (toy decoder, 150
# rounds, ~60 s; transformers' Llama too where .whl/hf/ is carried, 60 rounds, ~60 s).
# windows_copy: session 42's GPU checks (the copy test three times, the replay-identity, handler and
# export tests, the copy-kind probe's two modes; ~2-3 minutes). cold_copy: a copy in a graph captured
# by torch.cuda.graph under instrument(), eight cases recorded (record_cold_copy.py; ~1 minute).
# frontier: the capture's frontier as a scope edge (probe_capture_frontier.py). worker_ahead: the
# join's work made while torch writes and the worker's heap, each against its absence in one run
# (join_ahead.py, worker_heap.py on .bench-data's l12t21 and t7: carried, or recorded first; ~2-3 minutes).
# Usage: [STEPS="export_pace first_export"] [ROUNDS=5] [REPLAYS="20 7"] [LAYERS=36]
#   bash benchmarks/gpu/run_pending_33_31.sh;
# each step's log under $OUT, its last lines printed (first_export: each fresh process imports
# torch, 2-3 s there; 9 rounds of t1 and t7 did not fit 120 s in session 35). Together the
# default steps may not fit one device call (10 minutes) on that host: split them with STEPS.
set -o pipefail
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT"
STEPS=${STEPS:-export_pace first_export graph_derived template_runs capture_parts}
ROUNDS=${ROUNDS:-5}
REPLAYS=${REPLAYS:-20 7}  # export_pace's profiles: 828 graphed kernels a replay (35 replays: 28,980)
# LAYERS: export_pace's decoder layers (36; 12: 276 graphed kernels a replay, the 288-kernel shape)
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    $(ls .whl/hf/*.whl 2>/dev/null) || exit 3
  export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
python3 hatch_build.py > "$OUT/build.log" 2>&1 \
  || echo "extension build failed (see build.log): the pure-Python paths run"
python3 -m compileall -q -j 0 perfetto_graph_ann > /dev/null 2>&1  # as an install does: bytecode for the first export
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU"
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__)' 2>&1; } | tee "$OUT/env.txt"
RECORDED=""
[ -f .bench-data/t7.json.gz ] && RECORDED="t1 t7"

step() {  # step NAME TIMEOUT COMMAND...: the command's output in $OUT/NAME.log, its exit and last lines here
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "== $name: exit $?"; tail -n 12 "$OUT/$name.log"
}
for s in $STEPS; do
  case $s in
    export_pace) step export_pace 540 python3 benchmarks/gpu/export_pace.py --replays $REPLAYS --rounds "$ROUNDS" \
      --layers "${LAYERS:-36}" ;;
    first_export) step first_export 300 python3 benchmarks/first_export_imports.py --rounds "$ROUNDS" \
      --recorded $RECORDED ;;
    graph_derived)
      if [ -n "$RECORDED" ]; then step graph_derived 150 python3 benchmarks/graph_derived_ab.py --recorded $RECORDED \
        --synthetic --rounds "$ROUNDS"; else echo "== graph_derived: skipped (no .bench-data)"; fi ;;
    template_runs)
      if [ -n "$RECORDED" ]; then step template_runs 150 python3 benchmarks/template_runs_ab.py --recorded $RECORDED \
        --synthetic --rounds "$ROUNDS"; else echo "== template_runs: skipped (no .bench-data)"; fi ;;
    capture_parts) step capture_parts 200 python3 benchmarks/gpu/probe_capture_parts.py --rounds 100 --settle ;;
    hf_capture_parts) step hf_capture_parts 240 python3 benchmarks/gpu/probe_capture_parts.py --model hf-llama \
      --rounds 30 --settle --arms plain,inst,wrap,full ;;
    headline) step headline 200 python3 benchmarks/gpu/module_capture.py --rounds 150 --plain-detached --settle \
      --out "$OUT/headline.json"
      [ -d .whl/hf ] && step headline_hf 220 python3 benchmarks/gpu/module_capture.py --model hf-llama --rounds 60 \
        --plain-detached --settle --out "$OUT/headline_hf.json" ;;
    fresh_runner) step fresh_runner 290 python3 benchmarks/gpu/module_capture_fresh.py --rounds "$ROUNDS" \
      --batches 32 24 16 8 4 2 1 --arms plain plain_cupti instrumented modules --out "$OUT/fresh_runner.json" ;;
    fresh_hf) step fresh_hf 290 python3 benchmarks/gpu/module_capture_fresh.py --model hf-llama --rounds "$ROUNDS" \
      --batches 16 8 4 2 1 --arms plain modules --out "$OUT/fresh_hf.json" ;;
    windows_copy)  # session 42's fix and probe, not run on a GPU after it (tests/gpu/RESULTS.md, session 42)
      for i in 1 2 3; do step "copy_nodes_$i" 100 python3 -m pytest tests/gpu/test_copy_nodes_gpu.py -o addopts="" \
        -m gpu -p no:cacheprovider -q --timeout 90; done
      for f in test_replay_identity_gpu test_trace_handler_gpu test_export_gpu; do step "$f" 150 python3 -m pytest \
        "tests/gpu/$f.py" -o addopts="" -m gpu -p no:cacheprovider -q --timeout 120; done
      for m in cold warm; do step "memcpy_$m" 60 python3 benchmarks/gpu/probe_memcpy_kinds.py --warm-copy "$m"; done ;;
    cold_copy)  # session 43: a copy captured by torch.cuda.graph under instrument(), no eager copy first
      for w in "" --warm-copy; do for k in "" --keep; do for c in "" --calibrate; do
        step "cold_copy${w}${k}${c}" 60 python3 benchmarks/gpu/record_cold_copy.py --out "$OUT/cold_copy" $w $k $c
      done; done; done
      tar -C "$OUT" -czf "$OUT/cold_copy.tgz" cold_copy && rm -rf "$OUT/cold_copy" ;;
    frontier) step frontier 60 python3 benchmarks/gpu/probe_capture_frontier.py --out "$OUT/frontier.json" ;;
    worker_ahead)  # session 43's worker changes on that host's Python, the recorded profiles (.bench-data carried,
      # or recorded here first where missing: l12t21 the 12-layer decoder's 21 replays, t7 the 36-layer's 7)
      for spec in "l12t21 12 21" "t7 36 7"; do set -- $spec
        if [ ! -f ".bench-data/$1.json.gz" ]; then
          step "record_$1" 120 python3 benchmarks/gpu/record_export_trace.py "$OUT/rec_$1" --layers "$2" --replays "$3"
          if [ -f "$OUT/rec_$1/t$3.annotations.json" ]; then  # step says how it ended, it does not return it
            mkdir -p .bench-data && mv "$OUT/rec_$1/t$3.json.gz" ".bench-data/$1.json.gz" \
              && mv "$OUT/rec_$1/t$3.annotations.json" ".bench-data/$1.annotations.json"
          fi
          rm -rf "$OUT/rec_$1"
        fi
      done
      for t in l12t21 t7; do
        if [ -f ".bench-data/$t.json.gz" ]; then step "join_ahead_$t" 150 python3 benchmarks/join_ahead.py \
          ".bench-data/$t.json.gz" ".bench-data/$t.annotations.json" --rounds 12 --mb-s 80; fi
      done
      [ -f .bench-data/l12t21.json.gz ] && step worker_heap 150 python3 benchmarks/worker_heap.py \
        .bench-data/l12t21.json.gz .bench-data/l12t21.annotations.json --rounds 8
      ls "$OUT"/record_*.log > /dev/null 2>&1 && tar -czf "$OUT/bench-data.tgz" .bench-data ;;  # what it recorded comes back
    *) echo "== $s: unknown step (export_pace first_export graph_derived template_runs capture_parts" \
      "hf_capture_parts headline fresh_runner fresh_hf windows_copy cold_copy frontier worker_ahead)"; exit 2 ;;
  esac
done
