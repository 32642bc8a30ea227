#!/usr/bin/env bash
# The evaluation watchdog on the GPU (issue 32's 36_RMSNorm_: "no result from its evaluation worker after 300 s"
# for a judge that was working). One device call, carry [".devbundle"] (ray for the stages); ~6-8 min on an H100:
#   1. pytest: the GPU memory plan (tests/test_reference_on_host.py, on the GPU), the watchdog (local Ray)
#   2. benchmarks/watchdog/watch_gpu.py: an honest Triton RMSNorm judged at the full size (7.5 GB in, 7.5 GB
#      out) through kgen's real stages with the harness's 90 s limit; what the watchdog saw, step by step
#   bash benchmarks/watchdog_gpu.sh [DEADLINE_S=570]     -> $OUT/watchdog-summary.txt, $OUT/watch_rmsnorm.json
set -uo pipefail
start=$(date +%s); deadline=${1:-570}
left() { echo $(( deadline - ($(date +%s) - start) )); }
. benchmarks/device_call.sh
{
echo "== $(date +%T) pytest: the GPU memory plan and the watchdog"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_reference_on_host.py tests/test_evaluation_watchdog.py \
  tests/test_eval_units.py -k "reference or watchdog or memory_plan or page_locked or killed or progress or beats or lock or exactly" 2>&1 | tail -8
echo "== $(date +%T) 36_RMSNorm_ full through the stages ($(left)s left)"
timeout $(( $(left) - 15 )) python3 benchmarks/watchdog/watch_gpu.py benchmarks/real_model/problems/36_RMSNorm_.py \
  benchmarks/watchdog/rmsnorm_triton.py --size full --timeout 90 --out "$OUT/watch_rmsnorm.json" 2>&1 | quiet_ray | tail -80
echo "exit ${PIPESTATUS[0]}"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
} 2>&1 | tee "$OUT/watchdog-summary.txt"
echo "== done in $(( $(date +%s) - start ))s"
