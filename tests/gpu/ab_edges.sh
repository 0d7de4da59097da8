#!/bin/bash
# A/B of the capture cost by paired ratios: this tree against another checkout (OLD, default
# .ab/old, e.g. `git archive <rev> perfetto_graph_ann benchmarks tests/gpu hatch_build.py
# pyproject.toml | tar -x -C .ab/old`, carried with .whl), each with its own compiled path, in
# fresh processes alternating (order swapped every other round): probe_decoder_edges.py (plain,
# full, plain2; 45 captures) and the seed block (`benchmarks/capture.py --captures 150
# --capture-only`). Usage: ROUNDS=3 OUT=/tmp/ab bash tests/gpu/ab_edges.sh
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
python3 hatch_build.py >/dev/null 2>&1 || echo "new: build failed"
(cd "${OLD:-.ab/old}" && python3 hatch_build.py >/dev/null 2>&1) || echo "old: build failed"
PYTHONPATH=$PWD:/tmp/site python3 -c "
import torch; from perfetto_graph_ann.capture import marks as M, fastpath as F
print(F.describe(), M._native_functions(torch, torch.is_grad_enabled))"
show() { python3 -c "
import json
d=json.load(open('$1'))
print(' '.join(f\"{k} {v['total_med']:.2f} pairs {v['ratio_of_pairs_med']:.3f} med {v['ratio_med']:.3f}\" for k,v in d.items()))"; }
for r in $(seq 1 ${ROUNDS:-3}); do
  for arm in old new; do
    if [ $(( (r + 1) % 2 )) = 1 ]; then [ $arm = old ] && arm=new || arm=old; fi
    d=$PWD; [ $arm = old ] && d=$(realpath "${OLD:-.ab/old}")
    PYTHONPATH=$d:/tmp/site timeout 150 python3 tests/gpu/probe_decoder_edges.py --captures 45 --variants plain,full,plain2 > $OUT/dec_${arm}_$r.json 2>$OUT/dec_${arm}_$r.err || tail -3 $OUT/dec_${arm}_$r.err
    (cd $d && PYTHONPATH=$d:/tmp/site timeout 100 python3 benchmarks/capture.py --captures 150 --capture-only > $OUT/seed_${arm}_$r.log 2>&1)
    echo "round $r $arm: decoder $(show $OUT/dec_${arm}_$r.json) | seed $(grep -oE '"capture_overhead_pct(_of_min)?": [0-9.-]+' $OUT/seed_${arm}_$r.log | tr '\n' ' ')"
  done
done
