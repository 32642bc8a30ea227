#!/usr/bin/env bash
# Issue 28's last figure: every bundled starter (Triton and CUDA, every problem) judged under the default gate
# clock, RUNS times each, as one collection (`kgen eval COLLECTION`: CUDA builds spread over the CPUs, one
# evaluation at a time on the GPU, no baselines needed for the clock). Prints every evaluation's outcome, the gate
# check (held runs, gap, threshold) and lists anything flagged. Device call (carry .devbundle):
#   bash benchmarks/gate_starters_gpu.sh [DEADLINE_S=540] [RUNS=2] [RESUME_DB]
# A call that runs out of time is resumed by the next: pass the returned $OUT/gate_starters.db (carried) as RESUME_DB.
# Writes $OUT/gate_starters.jsonl, $OUT/gate_starters.db, $OUT/gate_starters-summary.txt.
set -uo pipefail
start=$(date +%s); deadline=${1:-540}; runs=${2:-2}; resume=${3:-}
left() { echo $(( deadline - ($(date +%s) - start) )); }
. benchmarks/device_call.sh
db=/tmp/gate_starters.db
python3 - "$runs" > "$OUT/gate_starters.jsonl" <<'PY'
import json, sys
from pathlib import Path
for run in range(int(sys.argv[1])):
    for path in sorted(Path("problems/starters").glob("*/*.py")):
        if path.name.startswith(("triton_", "cuda_")):
            print(json.dumps({"reference": path.parent.name, "candidate": str(path.resolve()),
                              "name": f"{path.parent.name}/{path.name}#{run + 1}"}))
PY
echo "$(grep -c . "$OUT/gate_starters.jsonl") entries" | tee "$OUT/gate_starters-summary.txt"
if [ -n "$resume" ] && [ -f "$resume" ]; then
  cp "$resume" "$db"
  run_id=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select max(id) from runs\").fetchone()[0])" "$db")
  cmd=(python3 -m kgen eval --resume "$run_id" --db "$db")
else
  rm -f "$db"*
  cmd=(python3 -m kgen eval "$OUT/gate_starters.jsonl" --db "$db")
fi
timeout -s INT "$(( $(left) - 40 ))" "${cmd[@]}" 2>&1 | quiet_ray | tail -40 | tee -a "$OUT/gate_starters-summary.txt"
python3 - "$db" <<'PY' | tee -a "$OUT/gate_starters-summary.txt"
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
rows = c.execute("select c.problem, c.origin, e.outcome, e.runtime_ms, e.details, e.message from evaluations e "
                 "join candidates c on c.id = e.candidate_id order by c.problem, c.id").fetchall()
flagged, gaps = [], []
for problem, origin, outcome, ms, details, message in rows:
    g = (json.loads(details or "{}").get("judge_clock") or {})
    if g.get("gap_ms") is not None:
        gaps.append((abs(g["gap_ms"]) / g["threshold_ms"], problem, origin, g["gap_ms"], g["threshold_ms"]))
    line = (f"{problem:18s} {(origin or '')[-48:]:48s} {outcome:13s} {ms if ms is None else round(ms, 4)!s:>8s}  "
            f"gate {g.get('clock', '-')}: check {str(g.get('check'))[:40]}, held {g.get('held_runs', g.get('clean_runs'))}"
            f", gap {g.get('gap_ms')} thr {g.get('threshold_ms')} flagged {g.get('flagged')}")
    print(line)
    if outcome != "correct":
        flagged.append(f"  {problem} {origin}: {outcome}: {(message or '')[:200]}")
print(f"{len(rows)} evaluated; not correct: {len(flagged)}")
print("\n".join(flagged))
if gaps:
    gaps.sort(reverse=True)
    print("closest to the gate's threshold (|gap| / threshold):")
    for ratio, problem, origin, gap, thr in gaps[:8]:
        print(f"  {ratio:5.2f}  {problem} {origin}: gap {gap * 1e3:.2f} us, threshold {thr * 1e3:.2f} us")
PY
python3 -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close()" "$db" "$OUT/gate_starters.db"
echo "== done in $(( $(date +%s) - start ))s"
