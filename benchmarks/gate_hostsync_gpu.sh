#!/usr/bin/env bash
# The gate clock on forwards that wait on the GPU inside (issue 30's suspicious leaderboard entry), one device call:
# each candidate judged once per pass.
#   bash benchmarks/gate_hostsync_gpu.sh DEADLINE_S   (carry .devbundle and benchmarks/collection_kb240)
#   MODES="on" (default): the passes' names, one pass each (the thirteenth session's calls 2-5 also ran "off" with
#   KGEN_GATE_SYNC_NULL=0, a knob of a null since removed: today every pass is the same judge);
#   FUSED_TEST=0 leaves out the fused-compare GPU test; FROB=0 the leaderboard entry (a CUDA build).
# $OUT: MODE/gate_hostsync.json per pass, gate_hostsync.log, fused_test.txt
set -uo pipefail
deadline=${1:-300}
started=$(date +%s)
. benchmarks/device_call.sh
small="softmax=tests/candidates/good_triton_softmax.py softmax=tests/candidates/host_sync_inside_forward.py
  softmax=benchmarks/gate_hostsync/sync_first.py softmax=benchmarks/gate_hostsync/busy_host.py"
frob=benchmarks/collection_kb240/KernelBench/level1/37_FrobeniusNorm_.py=benchmarks/collection_kb240/solutions/210328ec64c942ec0c70e5ba0c4f203d.py@full
left() { echo $(( deadline - ($(date +%s) - started) - 10 )); }
for mode in ${MODES:-on}; do
  # shellcheck disable=SC2086
  timeout "$(left)" \
    python3 benchmarks/gate_hostsync.py "$OUT/$mode" $small $([ "${FROB:-1}" = 1 ] && echo "$frob") 2>&1 | tee -a "$OUT/gate_hostsync.log"
done
[ "${FUSED_TEST:-1}" = 1 ] && [ "$(left)" -gt 40 ] && timeout "$(left)" python3 -m pytest -q -p no:cacheprovider \
  -m gpu tests/test_fused_compare.py 2>&1 | tail -5 > "$OUT/fused_test.txt"
ls -R "$OUT"
