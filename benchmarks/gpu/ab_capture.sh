#!/bin/bash
# A/B of the capture cost: this tree against another checkout (OLD, e.g. `git archive <rev>
# perfetto_graph_ann benchmarks tests/gpu hatch_build.py pyproject.toml | tar -x -C .ab/old`,
# carried to the GPU machine with .whl), each with its own compiled path, in fresh processes,
# the order of the two swapped every other round: the decoder, then the seed block
# (`benchmarks/capture.py --captures $SEED_CAPTURES --capture-only`: overhead of medians / mins).
#   DECODER=table (default): `benchmarks/capture.py --decoder --batches 16,1` (ratio of medians
#     per batch, and the captured code's ms per arm);
#   DECODER=pairs: `benchmarks/gpu/probe_decoder_edges.py --variants plain,full,plain2 --captures 45`
#     (each capture over the plain one of its turn, median; plain2 is the noise floor).
# Usage: OLD=.ab/old ROUNDS=2 [DECODER=pairs] [SEED_CAPTURES=150] bash benchmarks/gpu/ab_capture.sh;
# reports and logs under $OUT.
set -o pipefail
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT"; OLD=$(realpath "${OLD:?set OLD to the other tree}")
DECODER=${DECODER:-table}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
python3 hatch_build.py > /dev/null 2>&1 || echo "this tree: extension build failed"
(cd "$OLD" && python3 hatch_build.py > /dev/null 2>&1) || echo "$OLD: extension build failed"
PYTHONPATH=$PWD:/tmp/site python3 -c "import torch; from perfetto_graph_ann.capture import marks, fastpath
print('this tree:', fastpath.describe(), 'C++ counter / grad mode at', marks._native_functions(torch, torch.is_grad_enabled))"
summary() {  # one line from a decoder report (either kind) and a seed-block log
  python3 - "$1" "$2" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
if "by_batch" in d:
    dec = " ".join(f"b{b}={v['capture_ratio']:.3f}" for b, v in d["by_batch"].items())
    dec += " " + " ".join(f"{k}.fn={v['fn']:.2f}" for k, v in d.get("capture_phases_ms_median_batch16", {}).items())
else:
    dec = " ".join(f"{k} {v['total_med']:.2f} pairs {v['ratio_of_pairs_med']:.3f} med {v['ratio_med']:.3f}"
                   for k, v in d.items())
seed = open(sys.argv[2]).read()
pct = {k: re.search(rf'"{k}": ([0-9.\-]+)', seed) for k in ("capture_overhead_pct", "capture_overhead_pct_of_min")}
print(f"decoder {dec} | seed block " + " / ".join(f"{float(m.group(1)) if m else float('nan'):+.1f}%" for m in pct.values()))
PY
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  order="old new"; [ $((r % 2)) = 0 ] && order="new old"
  for arm in $order; do
    d=$PWD; [ $arm = old ] && d=$OLD
    if [ "$DECODER" = pairs ]; then  # this tree's probe, on either tree's package
      PYTHONPATH=$d:/tmp/site timeout 150 python3 benchmarks/gpu/probe_decoder_edges.py --captures 45 \
        --variants plain,full,plain2 > "$OUT/dec_${arm}_$r.json" 2> "$OUT/dec_${arm}_$r.log"
    else
      (cd "$d" && PYTHONPATH=$d:/tmp/site timeout 200 python3 benchmarks/capture.py --decoder --batches 16,1 \
        --rounds ${DEC_ROUNDS:-8} --out "$OUT/dec_${arm}_$r.json" > "$OUT/dec_${arm}_$r.log" 2>&1)
    fi
    (cd "$d" && PYTHONPATH=$d:/tmp/site timeout 100 python3 benchmarks/capture.py --captures ${SEED_CAPTURES:-40} \
      --capture-only > "$OUT/seed_${arm}_$r.log" 2>&1)
    echo "round $r $arm: $(summary "$OUT/dec_${arm}_$r.json" "$OUT/seed_${arm}_$r.log")"
  done
done
