#!/usr/bin/env bash
# One device call for issue 26: the 3x8 softmax search with two evaluators per GPU on a cold machine, and each
# evaluation's phases, timing and waits (benchmarks/evaluation_phases.py -> $OUT/phases.txt). Five files back.
#   bash benchmarks/share_gpu_diag.sh DEADLINE_S
set -uo pipefail
deadline=$(( $(date +%s) + ${1:?deadline seconds} ))
. benchmarks/device_call.sh
export KGEN_NO_BUNDLE=1
KGEN_EVALUATORS_PER_GPU=${KGEN_EVALUATORS_PER_GPU:-2} bash benchmarks/fixed_costs_gpu.sh $(( deadline - $(date +%s) - 15 )) search
python3 benchmarks/evaluation_phases.py "$OUT/search.db" > "$OUT/phases.txt" 2>&1
cat "$OUT/phases.txt"
