#!/usr/bin/env bash
# The next session's first device call (x1, carry .devbundle and benchmarks/collection_kb240): what the fourteenth
# session changed in the judge and could not run on a GPU, and the two collection entries judged `suspicious`
# beside nvcc builds, now judged alone.   bash benchmarks/call16_x1.sh DEADLINE_S
#   1. the judge's clock GPU tests (every c8 shave still `suspicious` now that a flagged timing is redone once;
#      honest starters unflagged) and the host-sync candidate, verbose, so a cut run still says which passed;
#   2. `kgen eval` alone, on a quiet GPU, of claude-3.5-sonnet L1 37_FrobeniusNorm_ and gpt-o1 L1 91_cumsum_reverse
#      (their details: whether the timing was redone, timing_first).
# SKIP_TESTS=1: the two entries only.
# $OUT: gpu_tests.txt, quiet.txt (one line per entry), quiet-*.json
set -uo pipefail
deadline=$(( $(date +%s) + ${1:-560} ))
. benchmarks/device_call.sh >/dev/null
left() { echo $(( deadline - $(date +%s) )); }
[ "${SKIP_TESTS:-0}" = 1 ] || timeout $(( $(left) - 70 )) python3 -m pytest -v -p no:cacheprovider -m gpu tests/test_judge_clock_gpu.py \
  tests/test_eval_gpu.py -k "gate or host_sync or good_triton" > "$OUT/gpu_tests.txt" 2>&1
grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/gpu_tests.txt" | tail -30
kb=benchmarks/collection_kb240
for spec in "level1/37_FrobeniusNorm_.py:210328ec64c942ec0c70e5ba0c4f203d" \
            "level1/91_cumsum_reverse.py:1a255ec793dba003efba862b50c9a35d"; do
  ref=${spec%%:*} sol=${spec##*:}
  [ "$(left)" -lt 25 ] && { echo "out of time before $ref" | tee -a "$OUT/quiet.txt"; break; }
  timeout $(( $(left) - 10 )) python3 -m kgen eval "$kb/KernelBench/$ref" "$kb/solutions/$sol.py" --json \
    --no-baselines > "$OUT/quiet-$sol.json" 2>"$OUT/quiet-$sol.err"
  python3 - "$OUT/quiet-$sol.json" "$ref" <<'PY' | tee -a "$OUT/quiet.txt"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(sys.argv[2], "no result", e); sys.exit()
d = r.get("details", {})
g = d.get("judge_clock") or {}
print(sys.argv[2], r["outcome"], r.get("runtime_ms"), "gap", g.get("gap_ms"), "thr", g.get("threshold_ms"),
      "shadow", g.get("shadow_runs"), "done", g.get("done_runs"), "redone:", bool(d.get("timing_first")),
      (d.get("timing_first") or {}).get("message", "")[:160], r.get("message", "")[:200])
PY
done
