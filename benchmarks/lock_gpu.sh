#!/usr/bin/env bash
# One device call measuring the GPU timing lock (kgen.judge.gpu_lock: baselines compile beside the
# candidates, only timed runs take turns) where it should show (issues 26, 30), cold caches, fresh DBs:
#   1. benchmarks/fixed_costs_gpu.sh FIXED_S eval search: kgen eval wall on a fresh DB / with the baselines in
#      it; the 3x8 softmax search's first result and candidates per GPU-hour
#   2. benchmarks/collection_gpu.sh COLLECTION_S: the 52-entry KernelBench collection (carry
#      benchmarks/collection_kb): entries evaluated, evaluations per GPU-hour, the summary
#   bash benchmarks/lock_gpu.sh [FIXED_S=250] [COLLECTION_S=320]
#   -> $OUT/lock-results.tar.gz (both steps' files, DBs included, caches not), $OUT/fixed_costs.log,
#      $OUT/figures.txt, and their key lines printed last
set -uo pipefail
final=${OUT:-$PWD/gpu-out}; mkdir -p "$final/fixed" "$final/collection"
OUT=$final/fixed bash benchmarks/fixed_costs_gpu.sh "${1:-250}" eval search
OUT=$final/collection bash benchmarks/collection_gpu.sh "${2:-320}"
cp "$final/fixed/fixed_costs.log" "$final/collection/figures.txt" "$final/" 2>/dev/null
tar czf "$final/lock-results.tar.gz" -C "$final" --exclude='*cache*' fixed collection && rm -rf "$final/fixed" "$final/collection"
echo "===== summary"
grep -E "^(cold-fresh-db|baselines-in-db|all-warm|search:|  first result|  startup|  breakdown)" "$final/fixed_costs.log"
cat "$final/figures.txt"
