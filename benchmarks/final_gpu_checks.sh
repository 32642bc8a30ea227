#!/usr/bin/env bash
# One device call: the Nsight Compute search (benchmarks/ncu_search.sh, fresh DB, 15% cap), then the CUDA
# softmax starters under the judge at full size (the __launch_bounds__ audit fix) -> $OUT/starters-cuda.txt
set -uo pipefail
start=$(date +%s)
bash benchmarks/ncu_search.sh 330
. benchmarks/device_call.sh >/dev/null
left=$(( 570 - ($(date +%s) - start) ))
echo "== CUDA starters under the judge (${left}s left)"
timeout "$left" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_eval_gpu.py -rA \
  -k "starter_is_correct and softmax and cuda" 2>&1 | tee "$OUT/starters-cuda.txt" | tail -8
