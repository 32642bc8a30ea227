#!/usr/bin/env bash
# The judge's gate clock (KGEN_JUDGE_CLOCK=gate, issue 28) on the GPU, one device call of 5-6 minutes
# (carry [".devbundle"], timeout_s 420):
#   bash benchmarks/judge_gate_gpu.sh [DEADLINE_S=360]
# 1. pytest -m gpu tests/test_judge_clock_gpu.py -k gate: c8_rerecord_start at shaves 0/5/20/50% on softmax small
#    (~60 us) and full (~5 ms), every shave `suspicious` by the gate clock; three honest Triton starters never flagged (~4 min)
# 2. `kgen eval` with KGEN_JUDGE_CLOCK=gate of honest starters (a CUDA one included, if time is left), printing per
#    evaluation both clocks (the judge's gate clock and the runner's events: medians, the gap, the threshold,
#    clean/shadow runs) and the first timed runs of each, a softmax starter with today's clock for comparison, and
#    c8_rerecord_start as written (10% shave); each only while at least 40 s are left
# Writes $OUT/judge_gate-summary.txt, $OUT/judge_gate/*.json. If the gate cannot be set up (e.g. the runner's
# interprocess end event cannot be opened across the sandbox's PID namespace), each evaluation says so in
# details.judge_clock.unavailable: printed below as "UNAVAILABLE: ...". Where the interprocess event cannot be opened
# but stream memory operations work, the runs are timed to each runner's end word instead ("gate clock ends: ...").
set -uo pipefail
start=$(date +%s); deadline=${1:-360}
left() { echo $(( deadline - ($(date +%s) - start) )); }
. benchmarks/device_call.sh
mkdir -p "$OUT/judge_gate"
summary() {  # one evaluation's JSON -> both clocks
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = d.get("details", {}).get("timing", {}) or {}
g = d.get("details", {}).get("judge_clock")
print(f"  {d['outcome']} runtime {d.get('runtime_ms')} ms; today's clock: gap {t.get('clock_gap_ms')} threshold "
      f"{t.get('clock_threshold_ms')}; {(d.get('message') or '')[:300]}")
if g is None:
    print("  gate clock: off")
    sys.exit(0)
if g.get("unavailable"):
    print(f"  gate clock UNAVAILABLE: {g['unavailable']}")
print(f"  gate clock ends: {g.get('end')}")
print(f"  gate clock ({g.get('wait')}): check {g.get('check')}; runs {g.get('runs')} clean {g.get('clean_runs')} "
      f"shadow {g.get('shadow_runs')} not held {g.get('not_held_runs')}; judge median {g.get('judge_median_ms')} "
      f"ms, runner median {g.get('runner_median_ms')} ms, null offset {g.get('null_offset_ms')} ms ({g.get('null_from')}, "
      f"{g.get('null_runs')} runs); gap {g.get('gap_ms')} ms, noise {g.get('noise_ms')}, threshold "
      f"{g.get('threshold_ms')} ms, flagged {g.get('flagged')}")
for judge_ms, runner_ms, opened_by, clean in (g.get("samples") or [])[:8]:
    print(f"    run: judge {judge_ms:.5f} ms  runner {runner_ms:.5f} ms  diff {1e3 * (judge_ms - runner_ms):7.2f} us  "
          f"{opened_by}{'' if clean else ' (not clean)'}")
PY
}
{
echo "== $(date +%T) pytest -m gpu tests/test_judge_clock_gpu.py -k gate ($(left)s left)"
timeout $(( $(left) - 50 )) python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_judge_clock_gpu.py -k gate \
  --junitxml "$OUT/judge_gate/pytest.xml" 2>&1 | tail -40
echo "pytest exit ${PIPESTATUS[0]}"
for spec in "gate softmax problems/starters/softmax/triton_row_in_registers.py" \
            "events softmax problems/starters/softmax/triton_row_in_registers.py" \
            "gate conv_relu_maxpool problems/starters/conv_relu_maxpool/triton_3xtf32_s2d_then_pool.py" \
            "gate softmax tests/attacks/c8_rerecord_start.py" \
            "gate softmax problems/starters/softmax/cuda_cluster_onepass.py"; do
  set -- $spec; clock=$1 problem=$2 cand=$3
  [ "$(left)" -lt 40 ] && { echo "== out of time before $clock $cand"; break; }
  name=$clock-$(basename "$cand" .py)
  echo "== $(date +%T) KGEN_JUDGE_CLOCK=$clock kgen eval $problem $cand ($(left)s left)"
  KGEN_JUDGE_CLOCK=$clock timeout $(( $(left) - 10 )) python3 -m kgen eval "$problem" "$cand" --json --no-baselines \
    --timeout 150 > "$OUT/judge_gate/$name.json" 2> "$OUT/judge_gate/$name.err"
  echo "  exit $?"; tail -2 "$OUT/judge_gate/$name.err"
  summary "$OUT/judge_gate/$name.json" 2>&1 | head -14
done
} 2>&1 | tee "$OUT/judge_gate-summary.txt"
echo "== done in $(( $(date +%s) - start ))s"
