#!/bin/bash
# A/B of the capture cost: this tree against another checkout (OLD, e.g. `git archive <rev>
# perfetto_graph_ann benchmarks tests/gpu hatch_build.py pyproject.toml | tar -x -C .ab/old`,
# carried to the GPU machine with .whl), each with its own compiled path, run alternately in
# fresh processes: the decoder (`benchmarks/capture.py --decoder`) and the seed block.
# Usage: OLD=.ab/old ROUNDS=2 bash tests/gpu/ab_capture.sh; JSON reports and logs under $OUT.
set -o pipefail
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT"; OLD=${OLD:?set OLD to the other tree}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
python3 hatch_build.py > /dev/null 2>&1 || echo "this tree: extension build failed"
(cd "$OLD" && python3 hatch_build.py > /dev/null 2>&1) || echo "$OLD: extension build failed"
summary() {  # the capture ratios of a decoder report, and the seed block's overhead
  python3 - "$1" "$2" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
ratios = " ".join(f"b{b}={v['capture_ratio']:.3f}" for b, v in d["by_batch"].items())
ph = d.get("capture_phases_ms_median_batch16", {})
fn = " ".join(f"{k}.fn={v['fn']:.2f}" for k, v in ph.items())
seed = open(sys.argv[2]).read()
pct = re.search(r'"capture_overhead_pct": ([0-9.\-]+)', seed)
print(f"decoder {ratios} {fn} | seed block {float(pct.group(1)) if pct else float('nan'):+.1f}%")
PY
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  for arm in old new; do
    d=.; [ $arm = old ] && d=$OLD
    (cd "$d" && PYTHONPATH=$PWD:/tmp/site timeout 200 python3 benchmarks/capture.py --decoder --batches 16,1 \
      --rounds ${DEC_ROUNDS:-8} --out "$OUT/dec_${arm}_$r.json" > "$OUT/dec_${arm}_$r.log" 2>&1)
    (cd "$d" && PYTHONPATH=$PWD:/tmp/site timeout 100 python3 benchmarks/capture.py --captures 40 --capture-only \
      > "$OUT/seed_${arm}_$r.log" 2>&1)
    echo "round $r $arm: $(summary "$OUT/dec_${arm}_$r.json" "$OUT/seed_${arm}_$r.log")"
  done
done
