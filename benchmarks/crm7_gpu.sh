#!/usr/bin/env bash
# One device call (TOTAL_S of steps, default 150; run it with a 240 s limit) for issue 25's last 2.5% of
# conv_relu_maxpool (lagpool judged 0.3178 ms, target 0.31), with benchmarks/kernel_round.sh:
#   lagpool as written (the current best), then triton_3xfp16_s2d_lagpool_oneprep.py as written (ONEPREP 1: the
#   weight layout folded into the split's launch; PDL 1: the conv launched with programmatic dependent launch)
#   and each idea on/off (ONEPREP=0,PDL=0 is lagpool's launch sequence in the same file), the PDL trigger point,
#   the split's tile/warps/vector knobs; then the judge (`kgen eval --json --no-baselines`) of oneprep's fastest
#   correct setting, and lagpool as written if time is left (same machine: the judged difference).
#   bash benchmarks/crm7_gpu.sh [TOTAL_S]  -> $OUT/crm7-results.tar.gz, $OUT/crm7-summary.txt
# Dry run off the device (small size, interpreter):
#   KGEN_NO_BUNDLE=1 OUT=/tmp/crm7-dry PATH=$PWD/.venv/bin:$PATH bash benchmarks/crm7_gpu.sh
. benchmarks/kernel_round.sh crm7 "${1:-150}" 75
CRM=problems/starters/conv_relu_maxpool

{
sweep crm-base 12 conv_relu_maxpool $CRM/triton_3xfp16_s2d_onedot_lagpool.py
sweep crm-oneprep 58 conv_relu_maxpool $CRM/triton_3xfp16_s2d_lagpool_oneprep.py --combo PDL=1 \
  --combo ONEPREP=0,PDL=0 --combo PDL=0 --combo ONEPREP=0 --combo PDL_TRIGGER=2 --combo PDL_TRIGGER=0 \
  --combo S2D_BLOCK_J=64 --combo S2D_WARPS=8 --combo S2D_VEC=1 --combo NUM_STAGES=3
echo "== oneprep best: $(best best-oneprep $CRM/triton_3xfp16_s2d_lagpool_oneprep.py "$R/crm-oneprep.json")"
echo "== lagpool: $(best lagpool $CRM/triton_3xfp16_s2d_onedot_lagpool.py "$R/crm-base.json")"
RESERVE=0
judge conv_relu_maxpool best-oneprep 60
judge conv_relu_maxpool lagpool 45
} 2>&1 | tee -a "$R/steps.log"
finish
