#!/usr/bin/env bash
# Issue 30's GPU measure: `kgen eval COLLECTION` over LLM-written KernelBench kernels (the public KernelBench
# leaderboard's, assembled by benchmarks/assemble_kb_collection.py into benchmarks/collection_kb/, which
# the device call carries), cold: fresh DB, fresh kgen cache. Writes to $OUT:
#   collection.log   the progress lines (done/total, outcome counts, ETA) and kgen's notes
#   summary.txt, summary.md, summary.json, entries.csv   the summary (partial if the time ran out)
#   figures.txt      wall time, evaluations, evaluations per GPU-hour, GPUs
#   where.txt        where the time went (benchmarks/collection_where.py): evaluators' busy share, first candidate
#                    on a GPU, CUDA builds left to the GPU's compile step, judge phases, the baselines' pace
#   runs.txt, leaderboard.txt   `kgen runs` and `kgen leaderboard` on the DB (the run shows there)
#   h100.db          the results DB
# Usage (device call, carry benchmarks/collection_kb and .devbundle):  bash benchmarks/collection_gpu.sh [LIMIT_S]
# A collection larger than one call (hundreds of entries: `python benchmarks/assemble_kb_collection.py MIRROR
# benchmarks/collection_kb240 --entries 300`): KGEN_COLLECTION=benchmarks/collection_kb240 for the first call; for the
# next, unpack its h100.db to a carried path and set KGEN_COLLECTION_RESUME=that path: the run in it continues
# (`kgen eval --resume`), and the figures count only this call's evaluations (the kgen cache is cold again).
set -uo pipefail
limit=${1:-480}
export KGEN_DB=/tmp/collection.db KGEN_CACHE_DIR=/tmp/kgen-cache-collection
. benchmarks/device_call.sh
rm -rf "$KGEN_DB" "$KGEN_DB"-* "$KGEN_CACHE_DIR"  # cold: not the DB device_call.sh seeds from .devbundle/h100.db
coll=${KGEN_COLLECTION:-benchmarks/collection_kb}  # KGEN_COLLECTION: another folder of the same layout (a dry run)
if [ ! -f "$coll/collection.jsonl" ]; then
  echo "SKIP: $coll/collection.jsonl is missing: run python benchmarks/assemble_kb_collection.py MIRROR here first" \
       "and carry benchmarks/collection_kb" | tee "$OUT/figures.txt"
  exit 0
fi
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
# KGEN_COMMIT: the local commit, written into the device command (the device's copy of .git can be older than the tree)
commit=${KGEN_COMMIT:-"$(git rev-parse --short HEAD 2>/dev/null || echo '?') (the git of the device, maybe stale)"}
echo "kgen $commit, $gpus GPU(s), $(grep -c . "$coll/collection.jsonl") entries" \
  | tee "$OUT/figures.txt"
what=("$coll/collection.jsonl")
before=0
if [ -n "${KGEN_COLLECTION_RESUME:-}" ]; then  # continue the run an earlier call left (its returned h100.db)
  cp "$KGEN_COLLECTION_RESUME" "$KGEN_DB"
  read -r run_id before < <(python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); r=c.execute('select max(id) from runs').fetchone()[0]
print(r, c.execute('select count(*) from evaluations e join candidates c on c.id=e.candidate_id where c.run_id=?', (r,)).fetchone()[0])" "$KGEN_DB")
  echo "resuming run $run_id ($before evaluations stored before this call)" | tee -a "$OUT/figures.txt"
  what=(--resume "$run_id")
fi
started=$(date +%s.%N)
timeout -s INT "$limit" python3 -m kgen eval "${what[@]}" --kernelbench "$coll" --timeout 120 \
  --db "$KGEN_DB" > "$OUT/summary.txt" 2> >(quiet_ray > "$OUT/collection.log")
rc=$?
ended=$(date +%s.%N)
sleep 1
save_db  # first: the DB is what a later call resumes from, and the summaries below can outlast the call
echo "kgen eval exit code $rc (124/130: stopped at ${limit} s; the run resumes with kgen eval --resume)" | tee -a "$OUT/figures.txt"
python3 - "$KGEN_DB" "$started" "$ended" "$gpus" "$OUT" "$before" <<'PY' | tee -a "$OUT/figures.txt"
import sys

from kgen.search.collection import entry_results
from kgen.search.collection_summary import render, summarize
from kgen.store.db import open_db, runs

db, started, ended, gpus, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
before = int(sys.argv[6])  # evaluations an earlier call stored (a resumed run): not this call's work
database = open_db(db, read_only=True)
with database.reader() as s:
    run = max(r.id for r in runs(s))
results, timed = entry_results(database, run)
summary = summarize(results, timed)
for form, name in (("markdown", "summary.md"), ("json", "summary.json"), ("csv", "entries.csv")):
    open(f"{out}/{name}", "w").write(render(summary, results, form))
with open(f"{out}/summary.txt", "a+") as f:  # cut off, kgen eval printed none: the (partial) summary here
    f.seek(0)
    if not f.read().strip():
        f.write(render(summary, results, "table"))
done = sum(r.outcome not in ("pending", "bad_row") for r in results)
wall = float(ended) - float(started)
now = done - before
print(f"run {run}: {done} of {len(results)} entries evaluated, {now} of them in this call's {wall:.0f} s wall "
      f"({'resumed' if before else 'cold: fresh DB and cache'}), "
      f"{now / (wall / 3600) / max(gpus, 1):.0f} evaluations per GPU-hour on {max(gpus, 1)} GPU(s); "
      f"outcomes {summary.outcomes}")
PY
python3 benchmarks/collection_where.py "$KGEN_DB" | tee "$OUT/where.txt"  # busy share, builds left to the GPU
python3 -m kgen runs --db "$KGEN_DB" > "$OUT/runs.txt" 2>&1
python3 -m kgen leaderboard --db "$KGEN_DB" --all > "$OUT/leaderboard.txt" 2>&1
tail -40 "$OUT/summary.txt"
