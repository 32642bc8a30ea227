#!/usr/bin/env bash
# One device call for issue 26 (sixteenth session): the 3x8 softmax search on a cold machine (two evaluators per GPU,
# the default, or KGEN_EVALUATORS_PER_GPU), each evaluation's phases ($OUT/phases.txt), then fixed_costs_gpu.sh's
# eval step (kgen eval on a fresh DB, then with the baselines in it), its files packed in $OUT/eval.tgz (at most
# eight files come back from a call).
#   bash benchmarks/fc16_gpu.sh DEADLINE_S
set -uo pipefail
deadline=$(( $(date +%s) + ${1:?deadline seconds} ))
. benchmarks/device_call.sh
export KGEN_NO_BUNDLE=1
bash benchmarks/fixed_costs_gpu.sh $(( deadline - $(date +%s) - 90 )) search
python3 benchmarks/evaluation_phases.py "$OUT/search.db" > "$OUT/phases.txt" 2>&1
head -12 "$OUT/phases.txt"
OUT=$OUT/eval bash benchmarks/fixed_costs_gpu.sh $(( deadline - $(date +%s) - 5 )) eval
tar -C "$OUT" -czf "$OUT/eval.tgz" eval && rm -rf "$OUT/eval"
