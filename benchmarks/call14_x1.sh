#!/usr/bin/env bash
# The next session's first device call (x1, carry .devbundle): the pass-timed gate check on the H100
# (benchmarks/gate_pass_gpu.sh: the waiting forwards must come out correct and excused, c8_rerecord_start's shaves
# suspicious), then the GPU tests of the judge's clock and of the candidates, verbose, so a cut run still says
# which passed.   bash benchmarks/call14_x1.sh DEADLINE_S
# $OUT: pass/gate_hostsync.json, gate_pass.log, gpu_tests.txt
set -uo pipefail
deadline=${1:-560}
started=$(date +%s)
bash benchmarks/gate_pass_gpu.sh 240
. benchmarks/device_call.sh >/dev/null
left=$(( deadline - ($(date +%s) - started) - 15 ))
[ "$left" -gt 60 ] && timeout "$left" python3 -m pytest -v -p no:cacheprovider -m gpu \
  tests/test_judge_clock_gpu.py tests/test_eval_gpu.py -k "gate or host_sync or good_triton" > "$OUT/gpu_tests.txt" 2>&1
grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/gpu_tests.txt" | tail -40
