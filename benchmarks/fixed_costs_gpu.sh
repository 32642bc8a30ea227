#!/usr/bin/env bash
# One device call for issue 26: kgen's fixed costs on a GPU, each step on a fresh DB and fresh caches
# (kgen's, Triton's and Inductor's), with where the seconds went printed and kept under $OUT.
#   bash benchmarks/fixed_costs_gpu.sh DEADLINE_S [STEP...]
# Steps (default: all, in this order; each gets the time left, bench last since it writes as it goes):
#   static   kgen eval of a candidate the static checks reject (tests/candidates/no_kernel.py): ~1 s,
#            no baselines, no DB, no sandbox, no torch
#   eval     the sandbox probe's seconds (fresh cache, then its kept answer); kgen eval of a Triton starter on a
#            fresh DB (baselines timed), then of another starter with the baselines in the DB (and its Triton
#            cache cold), then the first starter again (all warm)
#   search   kgen search --problem softmax --rounds 3 --candidates 8 --language triton (offline proposer):
#            candidates per GPU-hour of wall time, first result latency, the search's startup figures
#   race     the same search with KGEN_RACE=1 (clear losers stop timing early): run it beside `search` on one
#            machine, in either order, and compare the evaluations after the first (search_timeline.py's median)
#   bench    kgen bench with its defaults -> $OUT/bench-default/ (bench.md has the table of seconds)
#   judgework  one trial's judge work piece by piece (benchmarks/judge_work.py: inputs, float64 reference, torch's
#            own error, compare) at softmax's full size: ~15 s. Run it after search: it warms the machine
# Everything printed goes to $OUT/fixed_costs.log too; the JSON of each step is kept under $OUT.
set -uo pipefail
deadline=$(( $(date +%s) + ${1:?deadline seconds} )); shift
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(static eval search bench)
. benchmarks/device_call.sh
log=$OUT/fixed_costs.log
left() { echo $(( deadline - $(date +%s) )); }
fresh() {  # fresh caches for step $1, and a fresh DB path in $db
  local root=/tmp/fixed-costs/$1; rm -rf "$root"; mkdir -p "$root"
  export KGEN_CACHE_DIR=$root/kgen-cache TRITON_CACHE_DIR=$root/triton-cache TORCHINDUCTOR_CACHE_DIR=$root/inductor-cache
  db=$root/results.db
}
say() { echo "$@" | tee -a "$log"; }
eval_json() {  # label, json file, wall seconds: one line of outcome and times, one of the breakdown
  python3 - "$@" <<'PY' | tee -a "$log"
import json, sys
label, path, wall = sys.argv[1], sys.argv[2], float(sys.argv[3])
try:
    r = json.load(open(path))
except (OSError, ValueError) as e:
    print(f"{label}: no JSON result ({e}); see the log"); sys.exit()
b = r.get("details", {}).get("breakdown", {})
print(f"{label}: {r['outcome']} on {r.get('device')}, wall {wall:.1f} s, eval_s {r.get('eval_s') or 0:.1f}, "
      f"runtime {r.get('runtime_ms')} ms, eager {r.get('eager_ms')} ms, torch.compile {r.get('compile_ms')} ms")
print("  breakdown (s): " + ", ".join(f"{k} {v:.2f}" for k, v in b.items() if isinstance(v, (int, float))))
PY
}
run_eval() {  # label, candidate, db -> times `kgen eval --json`
  local label=$1 cand=$2 db=$3 t0 t1
  t0=$(date +%s.%N)
  timeout "$(left)" python3 -m kgen eval softmax "$cand" --json --db "$db" >"$OUT/eval-$label.json" 2>>"$OUT/eval-$label.err"
  t1=$(date +%s.%N)
  eval_json "$label" "$OUT/eval-$label.json" "$(python3 -c "print($t1 - $t0)")"
}
for step in "${steps[@]}"; do
  t=$(left); [ "$t" -lt 30 ] && { say "== skipped $step (only ${t}s left)"; continue; }
  say "== $(date +%T) $step (${t}s left)"
  case $step in
    static)
      fresh static
      run_eval static tests/candidates/no_kernel.py "$db"
      [ -e "$db" ] && say "  the DB was created: the static reject did more than the static checks" \
                   || say "  no DB created (no baselines were timed)" ;;
    eval)
      # the sandbox's probe as root (a sandboxed `import torch`) on a fresh cache, then its kept yes read back:
      # what each first sandbox of a fresh process waited for before the probe's answer was kept (issue 26)
      fresh probe
      python3 - <<'PY' 2>&1 | tee -a "$log"
import time
from kgen.judge import sandbox
for label in ("probed", "read back"):
    sandbox._probe_as_nobody.cache_clear()
    t = time.monotonic()
    answer = sandbox._run_as_nobody(True)
    print(f"  sandbox probe ({label}): runs as nobody {answer}, {time.monotonic() - t:.2f} s")
PY
      fresh eval
      run_eval cold-fresh-db problems/starters/softmax/triton_online_two_pass.py "$db"
      run_eval baselines-in-db problems/starters/softmax/triton_row_in_registers.py "$db"
      run_eval all-warm problems/starters/softmax/triton_online_two_pass.py "$db" ;;
    search|race)
      fresh "$step"
      started=$(date +%s.%N)
      KGEN_RACE=$([ "$step" = race ] && echo 1 || echo 0) timeout -s INT "$(left)" python3 -m kgen search \
        --problem softmax --rounds 3 --candidates 8 --language triton \
        --proposer offline --db "$db" --quiet 2>&1 | quiet_ray | tee "$OUT/$step.log" | tail -6
      wall=$(python3 -c "print($(date +%s.%N) - $started)")
      python3 - "$db" "$wall" "$step" <<'PY' | tee -a "$log" | tee "$OUT/$step-summary.txt"
import json, sqlite3, sys
db, wall, step = sys.argv[1], float(sys.argv[2]), sys.argv[3]
c = sqlite3.connect(db)
run_id, settings = c.execute("select id, settings from runs order by id desc limit 1").fetchone()
n, ok = c.execute("select count(*), sum(e.outcome = 'correct') from evaluations e join candidates k "
                  "on k.id = e.candidate_id where k.run_id = ? and e.outcome != 'no_code'", (run_id,)).fetchone()
startup = json.loads(settings or "{}").get("startup", {})
gpus = json.loads(settings or "{}").get("gpus") or 1  # the run's evaluators, one per GPU
raced = c.execute("select count(*) from evaluations e join candidates k on k.id = e.candidate_id where k.run_id = ? "
                  "and json_extract(e.details, '$.timing.raced') is not null", (run_id,)).fetchone()[0]
print(f"{step}: {n} evaluated, {ok} correct ({raced} raced out) in {wall:.0f} s of wall time (the command's, Python start to exit): "
      f"{n / wall * 3600 / gpus:.0f} candidates per GPU-hour of wall time ({gpus} GPU(s))")
print(f"  first result {startup.get('first_result_s')} s after the search began (the run's own clock; Python start "
      f"and imports before it are in the wall time)")
print("  startup (s): " + ", ".join(f"{k} {v}" for k, v in startup.items() if k != "judge_s"))
print("  judge phases summed (s): " + ", ".join(f"{k} {v:.1f}" for k, v in (startup.get("judge_s") or {}).items()))
PY
      # the evaluator's timeline: gaps between candidates (a profile, nothing compiled yet), first vs the rest
      python3 benchmarks/search_timeline.py "$db" --wall "$wall" 2>&1 | tee -a "$log" | tee -a "$OUT/$step-summary.txt"
      python3 -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d)" \
        "$db" "$OUT/$step.db" ;;
    judgework)
      timeout "$(left)" python3 benchmarks/judge_work.py --json "$OUT/judge_work.json" 2>&1 | tee -a "$log" ;;
    bench)
      fresh bench
      started=$SECONDS
      timeout -s INT "$(left)" python3 -m kgen bench --out "$OUT/bench-default" 2>&1 | quiet_ray \
        | tee "$OUT/bench.log" | grep -E "^  |seconds:" | tee -a "$log"
      say "kgen bench (defaults, fresh DB, cold caches): $((SECONDS - started)) s wall"
      [ -f "$OUT/bench-default/bench.md" ] && sed -n '/where the seconds went/,$p' "$OUT/bench-default/bench.md" | tee -a "$log" ;;
    *) say "unknown step $step" ;;
  esac
done
say "== $(date +%T) done, $(left)s left"
