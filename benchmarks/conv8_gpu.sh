#!/usr/bin/env bash
# One device call (TOTAL_S of steps, default 120; run it with a 200 s limit) for issue 25's conv2d: the
# conv_relu_maxpool launch trick (crm7: one pre-pass launch + programmatic dependent launch, -8 us judged) ported
# to conv2d's best, with benchmarks/kernel_round.sh:
#   onedot as written (the current best, 0.281 ms judged), then triton_3xfp16_s2d_onedot_oneprep.py as written
#   (ONEPREP 1: the weight layout folded into the split's launch; PDL 1: the conv launched with PDL) and each idea
#   off (ONEPREP=0,PDL=0 is onedot's launch sequence in the same file), then the PDL trigger point and the split's
#   tile/warps if the budget is left; then the judge (`kgen eval --json --no-baselines`) of oneprep's fastest
#   correct setting, and onedot as written if time is left (same machine: the judged difference; TOTAL_S >= 160).
#   bash benchmarks/conv8_gpu.sh [TOTAL_S]  -> $OUT/conv8-results.tar.gz, $OUT/conv8-summary.txt
# Dry run off the device (small size, interpreter):
#   KGEN_NO_BUNDLE=1 OUT=/tmp/conv8-dry PATH=$PWD/.venv/bin:$PATH bash benchmarks/conv8_gpu.sh
. benchmarks/kernel_round.sh conv8 "${1:-120}" 55
CV=problems/starters/conv2d

{
sweep conv-base 5 conv2d $CV/triton_3xfp16_s2d_onedot.py
sweep conv-oneprep 40 conv2d $CV/triton_3xfp16_s2d_onedot_oneprep.py --combo PDL=1 \
  --combo ONEPREP=0 --combo PDL=0 --combo ONEPREP=0,PDL=0 --combo PDL_TRIGGER=2 --combo S2D_WARPS=8 \
  --combo S2D_BLOCK_J=64
echo "== oneprep best: $(best best-oneprep $CV/triton_3xfp16_s2d_onedot_oneprep.py "$R/conv-oneprep.json")"
echo "== onedot: $(best onedot $CV/triton_3xfp16_s2d_onedot.py "$R/conv-base.json")"
RESERVE=0
judge conv2d best-oneprep 50
judge conv2d onedot 45
} 2>&1 | tee -a "$R/steps.log"
finish
