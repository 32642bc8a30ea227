#!/usr/bin/env bash
# One device call for issue 26 (sixteenth session): the 3x8 softmax search on a cold machine (two evaluators per GPU,
# the default, or KGEN_EVALUATORS_PER_GPU), each evaluation's phases ($OUT/phases.txt), then fixed_costs_gpu.sh's
# eval step (kgen eval on a fresh DB, then with the baselines in it) packed in $OUT/eval.tgz, then (STEPS=... bench)
# its bench step (kgen bench with its defaults, fresh DB and caches) packed in $OUT/bench.tgz: at most eight files
# come back from a call.
#   [STEPS="search eval bench"] bash benchmarks/fc16_gpu.sh DEADLINE_S
set -uo pipefail
deadline=$(( $(date +%s) + ${1:?deadline seconds} ))
. benchmarks/device_call.sh
export KGEN_NO_BUNDLE=1
for step in ${STEPS:-search eval}; do
  case $step in
    search)
      bash benchmarks/fixed_costs_gpu.sh $(( deadline - $(date +%s) - 330 )) search
      python3 benchmarks/evaluation_phases.py "$OUT/search.db" > "$OUT/phases.txt" 2>&1
      head -8 "$OUT/phases.txt" ;;
    eval|bench)
      OUT=$OUT/$step bash benchmarks/fixed_costs_gpu.sh $(( deadline - $(date +%s) - $([ "$step" = eval ] && echo 260 || echo 5) )) "$step"
      tar -C "$OUT" -czf "$OUT/$step.tgz" "$step" && rm -rf "${OUT:?}/$step" ;;
  esac
done
