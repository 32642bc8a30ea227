#!/usr/bin/env bash
# The gate check on forwards whose stream runs dry (timed to the runner's done word: kgen.judge.gate_clock), one
# device call: the honest forwards that wait inside (flagged when timed to the end word on the H100) must be
# correct, and c8_rerecord_start's shaves (tests/attacks) must stay flagged.   bash benchmarks/gate_pass_gpu.sh DEADLINE_S  (carry .devbundle)
# $OUT: pass/gate_hostsync.json, gate_pass.log
set -uo pipefail
deadline=${1:-300}
started=$(date +%s)
. benchmarks/device_call.sh
mkdir -p /tmp/shaves
python3 - <<'PY'
import sys
sys.path.insert(0, "tests")
from pathlib import Path
from attack_expectations import shave_variant
source = Path("tests/attacks/c8_rerecord_start.py").read_text()
for share in (0.05, 0.2, 0.5):
    Path(f"/tmp/shaves/c8_{share}.py").write_text(shave_variant(source, share, 0.0))
PY
specs="softmax=/tmp/shaves/c8_0.05.py softmax=/tmp/shaves/c8_0.2.py softmax=/tmp/shaves/c8_0.5.py
  softmax=tests/candidates/host_sync_inside_forward.py softmax=benchmarks/gate_hostsync/sync_first.py
  softmax=benchmarks/gate_hostsync/busy_host.py softmax=tests/candidates/good_triton_softmax.py
  softmax=/tmp/shaves/c8_0.05.py@full softmax=/tmp/shaves/c8_0.2.py@full"
# shellcheck disable=SC2086
timeout $(( deadline - ($(date +%s) - started) - 10 )) python3 benchmarks/gate_hostsync.py "$OUT/pass" $specs 2>&1 \
  | tee "$OUT/gate_pass.log"
ls -R "$OUT"
