#!/usr/bin/env bash
# Matmul 3xTF32 variants on the GPU, one device call: sweeps of triton_3xtf32_asplit.py (A split in registers,
# B presplit K-major) against triton_3xtf32_presplit.py as written.  Rows -> $OUT/mm-*.json, log -> $OUT/mm.log
#   bash benchmarks/mm_gpu.sh [BUDGET_S]
set -uo pipefail
budget=${1:-300}
. benchmarks/device_call.sh
log=$OUT/mm.log
sweep() { local name=$1; shift; timeout 240 python3 benchmarks/sweep.py matmul "$@" --budget-s "$budget" --json "$OUT/mm-$name.json" 2>&1 | grep -v "^  File\|^    " | tee -a "$log"; }
sweep presplit triton_3xtf32_presplit.py
sweep asplit-tiles triton_3xtf32_asplit.py --grid BLOCK_N=128,256 --grid NUM_WARPS=8,16 --grid PERSISTENT=0,1
sweep asplit-k triton_3xtf32_asplit.py --grid BLOCK_K=16,32 --grid NUM_STAGES=3,4 --grid PROMOTE=1,2
