#!/usr/bin/env bash
# One device call for issue 26: the 3x8 softmax search with two evaluators per GPU (the default) on a cold machine,
# then on the same machine with one (KGEN_EVALUATORS_PER_GPU=1), the same candidates' timed medians compared
# (benchmarks/compare_timings.py), then fixed_costs_gpu.sh's eval step (kgen eval on a fresh DB, then with the
# baselines in it). Each step on fresh caches and a fresh DB (fixed_costs_gpu.sh); the second search's machine is warm.
#   bash benchmarks/share_gpu.sh DEADLINE_S
set -uo pipefail
deadline=$(( $(date +%s) + ${1:?deadline seconds} ))
. benchmarks/device_call.sh
export KGEN_NO_BUNDLE=1  # unpacked above; PYTHONPATH and bwrap stay
left() { echo $(( deadline - $(date +%s) )); }
root=$OUT
OUT=$root/two bash benchmarks/fixed_costs_gpu.sh $(( $(left) - 200 )) search
OUT=$root/one KGEN_EVALUATORS_PER_GPU=1 bash benchmarks/fixed_costs_gpu.sh $(( $(left) - 75 )) search
python3 benchmarks/compare_timings.py "$root/one/search.db" "$root/two/search.db" --labels one-per-gpu two-per-gpu \
  | tee "$root/compare.txt"
OUT=$root/eval bash benchmarks/fixed_costs_gpu.sh "$(left)" eval
