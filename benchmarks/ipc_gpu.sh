#!/usr/bin/env bash
# Issue 28, one device call (carry [".devbundle"]; ~3 min of a 240 s deadline):
#   1. benchmarks/probe_ipc_clock2.py: which GPU-side clock the judge can read (poll / go / stamps / watch
#      against the runner's own events; ~45 s), -> $OUT/ipc2.txt, $OUT/ipc2.json
#   2. the C-level pins on a CUDA build of torch: tests/test_pins.py (its elapsed_time test runs only there)
#   3. `kgen eval` on the GPU: an honest Triton starter and the Triton softmax under c8_ctypes_clock (never
#      flagged / static_reject), then tests/attacks/c8_ctypes_elapsed (static_reject naming elapsed_time)
#   bash benchmarks/ipc_gpu.sh [DEADLINE_S=240]
set -uo pipefail
start=$(date +%s); deadline=${1:-240}
left() { echo $(( deadline - ($(date +%s) - start) )); }
. benchmarks/device_call.sh
{
echo "== $(date +%T) probe_ipc_clock2"
timeout 90 python3 benchmarks/probe_ipc_clock2.py --json "$OUT/ipc2.json" 2>&1 | tee "$OUT/ipc2.txt"
echo "exit ${PIPESTATUS[0]}"
echo "== $(date +%T) pytest tests/test_pins.py ($(left)s left)"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_pins.py 2>&1 | tail -4
for cand in problems/starters/softmax/triton_row_in_registers.py tests/attacks/c8_ctypes_clock.py \
            tests/attacks/c8_ctypes_elapsed.py; do
  [ "$(left)" -lt 40 ] && { echo "== out of time before $cand"; break; }
  echo "== $(date +%T) kgen eval softmax $cand ($(left)s left)"
  timeout $(( $(left) - 10 )) python3 -m kgen eval softmax "$cand" --json --no-baselines --timeout 120 \
    > /tmp/ipc-eval.json 2> /tmp/ipc-eval.err
  echo "exit $?"; tail -2 /tmp/ipc-eval.err
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t=d.get('details',{}).get('timing',{}); print(d['outcome'], d.get('runtime_ms'), 'gap', t.get('clock_gap_ms'), 'threshold', t.get('clock_threshold_ms'), (d.get('message') or '')[:300])" /tmp/ipc-eval.json
done
} 2>&1 | tee "$OUT/ipc_gpu-summary.txt"
echo "== done in $(( $(date +%s) - start ))s"
