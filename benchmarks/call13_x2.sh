#!/usr/bin/env bash
# The thirteenth session's two-GPU call: the gate clock's waiting null checked on the H100 (gate_hostsync_gpu.sh,
# "on" only), then issue 30's 240-entry collection resumed on every GPU of the machine for the rest of the time.
#   bash benchmarks/call13_x2.sh DEADLINE_S   (kind nvidia-h100-x2; carry .devbundle and benchmarks/collection_kb240)
set -uo pipefail
deadline=${1:-560}
started=$(date +%s)
MODES=on FUSED_TEST=0 bash benchmarks/gate_hostsync_gpu.sh 200
left=$(( deadline - ($(date +%s) - started) - 45 ))
KGEN_COLLECTION=benchmarks/collection_kb240 KGEN_COLLECTION_RESUME=benchmarks/collection_kb240/resume3.db \
  bash benchmarks/collection_gpu.sh "$left"
cd "$OUT" && tar czf /tmp/call13.tgz --exclude=h100.db . && mv /tmp/call13.tgz . \
  && find . -mindepth 1 -maxdepth 1 ! -name call13.tgz ! -name h100.db ! -name figures.txt ! -name summary.txt \
       ! -name gate_hostsync.log -exec rm -rf {} +
ls "$OUT"
