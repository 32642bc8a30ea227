#!/usr/bin/env bash
# One device call: the CUDA softmax starters under the judge at full size (issue 17's finding: a kernel declared
# `__global__ void __launch_bounds__(N) name(` was not counted as the candidate's own) -> $OUT/starters-cuda.txt
set -uo pipefail
. benchmarks/device_call.sh
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache}
timeout 560 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_eval_gpu.py -rA \
  -k "starter_is_correct and ${1:-softmax} and cuda" 2>&1 | tee "$OUT/starters-cuda.txt" | tail -8
