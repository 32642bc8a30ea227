#!/usr/bin/env bash
# One cold x1 device call for the next session (issue 26, and the gate clock's host-sync question from issue 30's
# collection): the search's figures with its baselines deferred to its first result (kgen.search.loop.
# DeferredBaselines), then the GPU tests of an honest forward that waits on the GPU between its kernels
# (tests/candidates/host_sync_inside_forward.py) and of the fused compare.
#   bash benchmarks/fc13_gpu.sh DEADLINE_S      (carry .devbundle; the search is the machine's first step: cold)
# $OUT: fixed_costs.log, search-summary.txt, gpu_tests.txt, fc13.tgz (everything else).
set -uo pipefail
deadline=${1:-400}
started=$(date +%s)
bash benchmarks/fixed_costs_gpu.sh "$(( deadline / 2 ))" search
. benchmarks/device_call.sh >/dev/null
left=$(( deadline - ($(date +%s) - started) - 15 ))
[ "$left" -gt 30 ] && timeout "$left" python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/test_eval_gpu.py tests/test_fused_compare.py -k "host_sync or good_triton or fused" 2>&1 | tail -25 \
  | tee "$OUT/gpu_tests.txt"
cd "$OUT" && tar czf /tmp/fc13.tgz . 2>/dev/null && mv /tmp/fc13.tgz . \
  && find . -maxdepth 1 -type f ! -name fc13.tgz ! -name fixed_costs.log ! -name gpu_tests.txt \
       ! -name search-summary.txt -delete && find . -mindepth 1 -type d -exec rm -rf {} +
ls "$OUT"
