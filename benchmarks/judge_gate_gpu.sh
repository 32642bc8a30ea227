#!/usr/bin/env bash
# The judge's gate clock (KGEN_JUDGE_CLOCK=gate, issue 28) on the GPU, one device call of about 5 minutes
# (carry [".devbundle"], timeout_s 420):
#   bash benchmarks/judge_gate_gpu.sh [DEADLINE_S=360]
# 1. pytest -m gpu tests/test_judge_clock_gpu.py -k gate: c8_rerecord_start at shaves 0/5/20/50% on softmax small
#    (~60 us) and full (~5 ms), every shave `suspicious` by the gate clock (held runs of both kinds, "return" and
#    "shadow", counted); six honest starters (Triton and CUDA, softmax small to matmul, conv_relu_maxpool) never
#    flagged, the gate's check made and deciding (~3 min)
# 2. `kgen eval`, printing per evaluation both clocks (the judge's gate clock and the runner's events: medians, the
#    gap, the threshold, held/shadow runs, judge-minus-runner per kind of run, the reply's lag after the end word)
#    and the first timed runs: benchmarks/gate_attacks/c8_early_end_word (the end word written early: what the gate
#    check cannot see; expected: gate gap ~0, reply-lag gap ~ the 20% shave, the outcome `suspicious` only if the
#    audit's watched check sees it) at full and small, the
#    conv_relu_maxpool starter, c8_rerecord_start as written (10%), and a softmax starter with today's clock for
#    comparison; each only while at least 40 s are left
# Writes $OUT/judge_gate-summary.txt, $OUT/judge_gate/*.json. If the gate cannot be set up, each evaluation says
# so in details.judge_clock.unavailable: printed below as "UNAVAILABLE: ...". On the H100 the interprocess end
# event cannot be opened across the sandbox's PID namespace: the runs are timed to each runner's end word.
set -uo pipefail
start=$(date +%s); deadline=${1:-360}
left() { echo $(( deadline - ($(date +%s) - start) )); }
. benchmarks/device_call.sh
mkdir -p "$OUT/judge_gate"
summary() {  # one evaluation's JSON -> both clocks
  python3 - "$1" <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
t = d.get("details", {}).get("timing", {}) or {}
g = d.get("details", {}).get("judge_clock")
print(f"  {d['outcome']} runtime {d.get('runtime_ms')} ms; today's clock (decides: {t.get('clock_decides', 'today')}): "
      f"gap {t.get('clock_gap_ms')} threshold {t.get('clock_threshold_ms')}; {(d.get('message') or '')[:300]}")
if g is None:
    print("  gate clock: off")
    sys.exit(0)
if g.get("unavailable"):
    print(f"  gate clock UNAVAILABLE: {g['unavailable']}")
print("  gate clock ends: " + "; ".join(f"{k}: {v[:60]}" for k, v in (g.get("end") or {}).items()))
print(f"  gate clock ({g.get('wait')}): check {g.get('check')}; runs {g.get('runs')} held {g.get('held_runs')} "
      f"shadow {g.get('shadow_runs')} (held {g.get('shadow_held_runs')}) not held {g.get('not_held_runs')} unknown "
      f"{g.get('unknown_runs')}; judge median {g.get('judge_median_ms')} ms, runner median {g.get('runner_median_ms')} "
      f"ms, null offset {g.get('null_offset_ms')} ms ({g.get('null_from')}, {g.get('null_runs')} runs); gap "
      f"{g.get('gap_ms')} ms, noise {g.get('noise_ms')}, threshold {g.get('threshold_ms')} ms, flagged {g.get('flagged')}")
samples = g.get("samples") or []
for kind in ("return", "shadow"):
    diffs = [1e3 * (s[0] - s[1]) for s in samples if s[2] == kind and s[3]]
    if diffs:
        print(f"  held {kind} runs: {len(diffs)}, judge-minus-runner median {statistics.median(diffs):.2f} us "
              f"(min {min(diffs):.2f}, max {max(diffs):.2f})")
lags = [s[4] * 1e3 for s in samples if len(s) > 4 and s[4] is not None]
if lags:
    print(f"  reply lag after the end: median {statistics.median(lags):.1f} us (min {min(lags):.1f}, max "
          f"{max(lags):.1f}); do-nothing runs' median {g.get('null_reply_lag_median_ms')} ms; gap "
          f"{g.get('reply_lag_gap_ms')} ms, noise {g.get('reply_lag_noise_ms')} ms (advisory)")
for s in samples[:6]:
    print(f"    run: judge {s[0]:.5f} ms  runner {s[1]:.5f} ms  diff {1e3 * (s[0] - s[1]):7.2f} us  {s[2]}"
          f"{'' if s[3] else ' (held ' + str(s[3]) + ')'}")
PY
}
{
echo "== $(date +%T) pytest -m gpu tests/test_judge_clock_gpu.py -k gate ($(left)s left)"
KGEN_GATE_RESULTS="$OUT/judge_gate/pytest-results.json" timeout $(( $(left) - 100 )) python3 -m pytest -q \
  -p no:cacheprovider -m gpu tests/test_judge_clock_gpu.py -k gate --junitxml "$OUT/judge_gate/pytest.xml" 2>&1 | tail -40
echo "pytest exit ${PIPESTATUS[0]}"
[ -f "$OUT/judge_gate/pytest-results.json" ] && python3 - "$OUT/judge_gate/pytest-results.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):  # one line per evaluation of the pytest part
    g, t = r.get("judge_clock") or {}, r.get("timing") or {}
    print(f"  {'/'.join(str(k) for k in r['key']):58s} {r['outcome']:10s} {r.get('runtime_ms') or 0:8.4f} ms  gate: "
          f"{(g.get('check') or '-')[:8]} held {g.get('held_runs')}/{g.get('runs')} (shadow {g.get('shadow_runs')}) "
          f"gap {g.get('gap_ms')} thr {g.get('threshold_ms')} | today's gap {t.get('clock_gap_ms')} thr "
          f"{t.get('clock_threshold_ms')} | reply lag gap {g.get('reply_lag_gap_ms')} noise "
          f"{g.get('reply_lag_noise_ms')}")
PY
for spec in "gate full softmax benchmarks/gate_attacks/c8_early_end_word.py" \
            "gate small softmax benchmarks/gate_attacks/c8_early_end_word.py" \
            "gate full conv_relu_maxpool problems/starters/conv_relu_maxpool/triton_3xtf32_s2d_then_pool.py" \
            "gate full softmax tests/attacks/c8_rerecord_start.py" \
            "events full softmax problems/starters/softmax/triton_row_in_registers.py"; do
  set -- $spec; clock=$1 size=$2 problem=$3 cand=$4
  [ "$(left)" -lt 40 ] && { echo "== out of time before $clock $size $cand"; break; }
  name=$clock-$size-$(basename "$cand" .py)
  echo "== $(date +%T) KGEN_JUDGE_CLOCK=$clock kgen eval $problem $cand --size $size ($(left)s left)"
  KGEN_JUDGE_CLOCK=$clock timeout $(( $(left) - 10 )) python3 -m kgen eval "$problem" "$cand" --size "$size" --json \
    --no-baselines --timeout 150 > "$OUT/judge_gate/$name.json" 2> "$OUT/judge_gate/$name.err"
  echo "  exit $?"; tail -2 "$OUT/judge_gate/$name.err"
  summary "$OUT/judge_gate/$name.json" 2>&1 | head -16
done
} 2>&1 | tee "$OUT/judge_gate-summary.txt"
echo "== done in $(( $(date +%s) - start ))s"
