#!/usr/bin/env bash
# The judge's clock check and the runner's pins on the GPU (issue 28), in one device call of about 8 minutes:
#   bash benchmarks/judge_clock_gpu.sh [BUDGET_S]      (default 400: the Python part's deadline)
# Evaluates every Triton and CUDA starter of the five bundled problems (honest: never flagged; each one's
# clock gap against its measured threshold), the class-8 timing attacks (all caught: tests/attacks/c8_*)
# and the clock matrix (shaves of 5-50% and 0.05 ms on a short and a long kernel); see
# benchmarks/judge_clock_gpu.py. Writes $OUT/judge_clock/{judge_clock.jsonl,judge_clock.md} and
# $OUT/judge_clock.log; prints the table at the end.
set -uo pipefail
budget=${1:-400}
. benchmarks/device_call.sh
python3 benchmarks/judge_clock_gpu.py --out "$OUT/judge_clock" --budget-s "$budget" 2>&1 | tee "$OUT/judge_clock.log" \
  | grep -v -E "^(USDT|\s+File |\s+\^)" | tail -120
