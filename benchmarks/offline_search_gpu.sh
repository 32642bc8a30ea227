#!/usr/bin/env bash
# Issue 25's last criterion: `kgen search --problem P --rounds 3` with the offline proposer reaches each problem's
# best kernel from the starters. One fresh DB per problem (cold: a user's first search), language any (the CUDA
# starters are built by nvcc in the compile stage), 8 candidates a round. Prints per problem the wall time, the
# search's five fastest correct candidates (origin = the starter or its retuning, round, ms, both speedups, % of the
# roofline) and the starter the issue names as the best. Device call (carry .devbundle):
#   bash benchmarks/offline_search_gpu.sh DEADLINE_S PROBLEM...
# Writes $OUT/search-P.log, $OUT/search-P.md and $OUT/offline_search-summary.txt (the DBs stay on the device).
set -uo pipefail
start=$(date +%s); deadline=${1:-540}; shift
left() { echo $(( deadline - ($(date +%s) - start) )); }
. benchmarks/device_call.sh
problems=("$@"); [ ${#problems[@]} -eq 0 ] && problems=(softmax layernorm matmul conv2d conv_relu_maxpool)
for p in "${problems[@]}"; do
  [ "$(left)" -lt 60 ] && { echo "== out of time before $p" | tee -a "$OUT/offline_search-summary.txt"; break; }
  db=/tmp/offline-$p.db; rm -f "$db"*
  t0=$(date +%s)
  echo "== $(date +%T) kgen search --problem $p --rounds 3 --candidates 8 ($(left)s left)" | tee -a "$OUT/offline_search-summary.txt"
  timeout -s INT "$(( $(left) - 15 ))" python3 -m kgen search --problem "$p" --rounds 3 --candidates 8 --language any \
    --proposer offline --db "$db" --quiet > "$OUT/search-$p.log" 2>&1
  echo "  exit $? after $(( $(date +%s) - t0 )) s wall; $(grep -c 'candidate' "$OUT/search-$p.log") candidate lines" \
    | tee -a "$OUT/offline_search-summary.txt"
  python3 - "$db" "$p" <<'PY' | tee "$OUT/search-$p.md" | tee -a "$OUT/offline_search-summary.txt"
import sqlite3, sys
db, problem = sys.argv[1], sys.argv[2]
c = sqlite3.connect(db)
origin_of = dict(c.execute("select id, origin from candidates"))
def root(origin):  # "retuning of candidate #12" -> that candidate's own origin, down to the starter
    seen = 0
    while origin and origin.startswith("retuning of candidate #") and seen < 50:
        origin, seen = origin_of.get(int(origin.rsplit("#", 1)[1]), origin), seen + 1
    return origin
rows = c.execute("select c.origin, c.round, e.outcome, e.runtime_ms, e.speedup_eager, e.speedup_compile, "
                 "e.roofline_pct, e.norm_rel_err from evaluations e join candidates c on c.id = e.candidate_id "
                 "where c.problem = ? order by (e.outcome != 'correct'), e.runtime_ms", (problem,)).fetchall()
outcomes = {}
for r in rows:
    outcomes[r[2]] = outcomes.get(r[2], 0) + 1
print(f"  {len(rows)} evaluated: {outcomes}")
print("  | origin | round | ms | vs eager | vs torch.compile | % roofline | normwise |")
print("  | --- | --- | --- | --- | --- | --- | --- |")
for origin, rnd, outcome, ms, se, sc, roof, err in [r for r in rows if r[2] == "correct"][:5]:
    f = lambda v, d: "-" if v is None else f"{v:.{d}f}"
    print(f"  | {root(origin or '')[:90]} | {rnd} | {f(ms, 4)} | {f(se, 2)} | {f(sc, 2)} | {f(roof, 1)} | {f(err, 1) if err is None else f'{err:.1e}'} |")
PY
done
echo "== done in $(( $(date +%s) - start ))s"
