#!/usr/bin/env bash
# Nsight Compute's detail sections for starters (issue 25), one report per starter:
#   bash benchmarks/ncu_starters.sh DEADLINE_S PROBLEM:STARTER...   -> $OUT/ncu-PROBLEM-STARTER.txt
set -uo pipefail
deadline=$(( $(date +%s) + ${1:?deadline seconds} )); shift
[ -n "${OUT:-}" ] || . benchmarks/device_call.sh
NCU=${KGEN_NCU:-$(command -v ncu || ls -d /usr/local/cuda*/bin/ncu 2>/dev/null | tail -1)}
for ps in "$@"; do
  problem=${ps%%:*}; starter=${ps#*:}
  t=$(( deadline - $(date +%s) )); [ "$t" -lt 20 ] && { echo "== skipped ncu $ps (${t}s left)"; continue; }
  echo "== $(date +%T) ncu $problem $starter (${t}s left)"
  timeout "$t" "$NCU" --profile-from-start off --target-processes all --clock-control none \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
    python3 benchmarks/ncu_starter.py "$problem" "problems/starters/$problem/$starter.py" \
    > "$OUT/ncu-$problem-$starter.txt" 2>&1 || echo "   (ncu $ps failed or timed out)"
  grep -E "Duration|DRAM Throughput|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Stall|L2 Hit|L1/TEX Hit|==PROF==|rror" \
    "$OUT/ncu-$problem-$starter.txt" | head -40
done
