#!/usr/bin/env bash
# One device call for issue 17's `kgen export --aot` and the Nsight Compute test log:
#   bash benchmarks/aot_gpu_checks.sh
# records tests/data/ncu_softmax_h100.csv with kgen's own ncu command line ($OUT/ncu_softmax_h100.csv), then
# the real-GPU export tests (re-verification, --aot for Triton and for CUDA C++) -> $OUT/aot-tests.txt
set -uo pipefail
. benchmarks/device_call.sh
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache}
timeout 120 python3 benchmarks/probe_ncu.py "$OUT" record 2>&1 | tail -5
timeout 420 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_export_aot.py tests/test_export.py -rA \
  2>&1 | tee "$OUT/aot-tests.txt" | tail -30
