#!/usr/bin/env bash
# One device call as a list of steps under one deadline (the device tool stops a command at 10 min):
#   bash benchmarks/gpu_steps.sh DEADLINE_S STEP...
# Steps:
#   tests                        pytest -m "gpu and not slow" tests/test_eval_gpu.py  -> $OUT/gpu-tests.txt
#   search:PROBLEM:ROUNDS:N[:LANG]  kgen search (offline proposer); an unfinished run of the same problem,
#                                rounds, candidates and language in the DB is resumed instead of restarted
#   bench:P1,P2:ROUNDS:N[:LANG]  kgen bench -> $OUT/bench/
#   bench                        kgen bench with its defaults on a fresh DB (the < 300 s budget) -> $OUT/bench-default/
#   scaling:P1,P2:ROUNDS:N[:LANG]  kgen bench --gpus 1 --gpus 2 (a pass, DB and caches per count) -> $OUT/scaling/
#   sweep:PROBLEM:STARTER[:A=1,2+B=3,4]  benchmarks/sweep.py over the grid -> $OUT/sweepI-PROBLEM-STARTER.json
# Each step gets the time left (a step cut off by it is marked interrupted, and resumes next call).
# Everything the steps print goes to $OUT/steps.log; the DB ($KGEN_DB) is saved to $OUT/h100.db.
set -uo pipefail
deadline=$(( $(date +%s) + ${1:?deadline seconds} )); shift
. benchmarks/device_call.sh
log=$OUT/steps.log
left() { echo $(( deadline - $(date +%s) )); }
unfinished_run() {  # problem rounds candidates language -> run id or nothing
  python3 - "$KGEN_DB" "$@" <<'PY'
import json, os, sqlite3, sys
db, problem, rounds, cands, lang = sys.argv[1:]
if not os.path.exists(db):
    sys.exit()
rows = sqlite3.connect(db).execute("select id, settings from runs where problem=? and status!='finished' "
                                   "and rounds_planned=? and candidates_per_round=? order by id desc",
                                   (problem, int(rounds), int(cands))).fetchall()
for run_id, settings in rows:
    if json.loads(settings or "{}").get("language", "any") == lang:
        print(run_id)
        break
PY
}
nsweep=0
for step in "$@"; do
  t=$(left); [ "$t" -lt 30 ] && { echo "== skipped $step (only ${t}s left)" | tee -a "$log"; continue; }
  echo "== $(date +%T) $step (${t}s left)" | tee -a "$log"
  IFS=: read -r kind a b c d <<<"$step"
  case $kind in
    tests) timeout "$t" python3 -m pytest -q -p no:cacheprovider -m "gpu and not slow" tests/test_eval_gpu.py \
             2>&1 | tee "$OUT/gpu-tests.txt" | tail -5 | tee -a "$log" ;;
    search) lang=${d:-any}; resume=$(unfinished_run "$a" "$b" "$c" "$lang")
            if [ -n "$resume" ]; then args=(--resume "$resume"); else
              args=(--problem "$a" --rounds "$b" --candidates "$c" --language "$lang" --proposer offline); fi
            echo "kgen search ${args[*]}" | tee -a "$log"
            timeout -s INT "$t" python3 -m kgen search "${args[@]}" --db "$KGEN_DB" --quiet --timeout 150 2>&1 \
              | quiet_ray | tee -a "$log" | tail -4 ;;
    bench) if [ -z "$a" ]; then
             started=$SECONDS
             timeout -s INT "$t" python3 -m kgen bench --out "$OUT/bench-default" 2>&1 | quiet_ray | tee -a "$log" | tail -12
             echo "kgen bench (defaults, fresh DB): $((SECONDS - started)) s wall" | tee -a "$log"
           else
             pargs=(); for p in ${a//,/ }; do pargs+=(--problems "$p"); done
             timeout -s INT "$t" python3 -m kgen bench "${pargs[@]}" --rounds "$b" --candidates "$c" \
               --language "${d:-any}" --db "$KGEN_DB" --out "$OUT/bench" --timeout 150 2>&1 | quiet_ray | tee -a "$log" | tail -4
           fi ;;
    scaling) pargs=(); for p in ${a//,/ }; do pargs+=(--problems "$p"); done
             timeout -s INT "$t" python3 -m kgen bench "${pargs[@]}" --rounds "$b" --candidates "$c" \
               --language "${d:-triton}" --gpus 1 --gpus 2 --out "$OUT/scaling" --timeout 150 2>&1 | quiet_ray \
               | tee -a "$log" | tail -6 ;;
    sweep) gargs=(); [ -n "$c" ] && for g in ${c//+/ }; do gargs+=(--grid "$g"); done
           timeout "$t" python3 benchmarks/sweep.py "$a" "$b" "${gargs[@]}" --budget-s $(( t - 20 )) \
             --json "$OUT/sweep$((++nsweep))-$a-${b%.py}.json" 2>&1 | tee -a "$log" | tail -3 ;;
    *) echo "unknown step $step" | tee -a "$log" ;;
  esac
done
save_db
echo "== $(date +%T) done, $(left)s left" | tee -a "$log"
