#!/usr/bin/env bash
# Issue 32 on the H100: the real-model harness (benchmarks/real_model/harness.py), a device call at a time, at full
# size, --language any, the 12 problems of problems/ and the 3 of problems_level3/ (level 3 first: the slowest start
# while the call has the most time left), one candidate per problem and round, 3 rounds.
#
#   bash benchmarks/real_model/gpu_round.sh 0    # call 1: time every problem's baselines (eager, torch.compile; kept
#                                                # in the results DB) and the GPU's ceilings, render round 1's prompts
#   bash benchmarks/real_model/gpu_round.sh R    # R = 1, 2, 3: evaluate round R (a problem the time box left behind
#                                                # in an earlier round first), render round R+1's prompts (not past
#                                                # 3), print the per-round table
#   The same command again continues: every step skips what is done. `--rest` is accepted and changes nothing.
#
# Between calls the work folder travels: the device call carries benchmarks/real_model/work-h100 (and .devbundle);
# this script writes it back as $OUT/work-h100.tar.gz (results.db, harness.json, ceilings.json, device.txt,
# problems/, prompts/, round<R>/ with prompts, replies, summaries; no caches), which is unpacked over the same
# path before the next call (README.md, "On the H100, call by call"). Also to $OUT: prompts.tar.gz (the prompt
# files waiting for a reply, as work-h100/round<R>/<problem>.prompt.md), table.md (the per-round table and every
# failure's reason), status.txt (what each problem did this call), log.txt.
#
# The time box (RM_LIMIT, default 540 s for the device's 600 s limit): the harness starts no problem with less
# than RM_RESERVE (default 120) s left before RM_LIMIT - 40 s, and is stopped (SIGINT: its run is marked
# interrupted and resumes next call) at RM_LIMIT - 40 s, so the last 40 s pack the work folder. A problem that did
# not run stays a round behind; the next call evaluates it first (its reply is already there).
# Expected durations on one H100 (from the lock/fixed-cost calls of 2026-11-26, not yet measured with this script):
#   call 1 (R=0): ~15 s bundle + ~10 s ceilings + baselines of 15 problems, 4 at a time, ~20-40 s each
#                 (level 3 more) -> ~150-250 s in all;
#   R >= 1: per problem ~25-40 s for a Triton reply (the evaluator's start ~8 s, compile, a cold judge ~15-20 s),
#                 ~60-100 s for a CUDA one (nvcc), so 15 problems take ~500-900 s: a round needs this call and
#                 most likely part of the next (the time box leaves the rest; they go first in the next call).
#
# Settings: RM_WORK (benchmarks/real_model/work-h100), RM_PROBLEMS (files or folders, round 1 only), RM_SIZE (full),
# RM_LANGUAGE (any), RM_TIMEOUT (the judge's per-candidate limit, 90 s; fixed at round 1), RM_LIMIT, RM_RESERVE.
# RM_SKIP: problem names (space-separated) this call leaves alone (one longer than a device call).
# Dry run off the device (small size, Triton's interpreter, 2 problems; you write the reply files):
#   KGEN_NO_BUNDLE=1 OUT=/tmp/rm-dry PATH=$PWD/.venv/bin:$PATH RM_SIZE=small RM_LANGUAGE=triton \
#     RM_PROBLEMS="benchmarks/real_model/problems/23_Softmax.py benchmarks/real_model/problems/36_RMSNorm_.py" \
#     bash benchmarks/real_model/gpu_round.sh 0
set -uo pipefail
start=$(date +%s)
R=${1:?usage: gpu_round.sh R [--rest]   (R = 0: baselines + round 1 prompts; 1-3: run round R, render R+1)}
case "$R" in 0|1|2|3) ;; *) echo "gpu_round.sh: R must be 0, 1, 2 or 3 (got $R)" >&2; exit 2 ;; esac
WORK=${RM_WORK:-benchmarks/real_model/work-h100}
LIMIT=${RM_LIMIT:-540}
RESERVE=${RM_RESERVE:-120}
PACK_S=40
H=benchmarks/real_model/harness.py
. benchmarks/device_call.sh
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache-rm}
mkdir -p "$KGEN_CACHE_DIR"
LOG=$OUT/log.txt
exec > >(tee -a "$LOG") 2>&1
deadline=$(( start + LIMIT - PACK_S ))
left() { echo $(( deadline - $(date +%s) )); }
gpu=$(python3 -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')")
echo "== $(date +%T) gpu_round.sh $R on $gpu, work $WORK, $(left) s before packing"

if [ "$R" = 0 ]; then
  if [ -f "$WORK/harness.json" ]; then
    echo "== $WORK has round 1's settings already: timing the missing baselines, rendering the missing prompts"
    timeout -k 20 -s INT "$(left)" python3 $H render --round 1 --work "$WORK" --baselines --keep --deadline "$deadline" \
      2>&1 | quiet_ray
  else
    # shellcheck disable=SC2086  # RM_PROBLEMS is a list
    timeout -k 20 -s INT "$(left)" python3 $H render --round 1 --work "$WORK" --baselines --deadline "$deadline" \
      --size "${RM_SIZE:-full}" --language "${RM_LANGUAGE:-any}" --timeout "${RM_TIMEOUT:-90}" \
      --problems ${RM_PROBLEMS:-benchmarks/real_model/problems_level3 benchmarks/real_model/problems} 2>&1 | quiet_ray
  fi
  echo "$gpu" > "$WORK/device.txt"
else
  if [ ! -f "$WORK/harness.json" ]; then
    echo "gpu_round.sh: $WORK has no harness.json: unpack the last call's work-h100.tar.gz there (or run R=0)" >&2
    exit 2
  fi
  if [ -f "$WORK/device.txt" ] && [ "$(cat "$WORK/device.txt")" != "$gpu" ]; then
    echo "WARNING: this machine's GPU ($gpu) is not the one round 1 measured on ($(cat "$WORK/device.txt")): its"
    echo "  baselines are timed again, and the prompts rendered there (device, ceilings, baselines) drift from the"
    echo "  search's requests (the harness says so per problem). Ask for nvidia-h100-x1."
  fi
fi
# the GPU's ceilings, measured once (call 1) and kept with the work folder: every call's prompts show the same
[ -f "$WORK/ceilings.json" ] && cp "$WORK/ceilings.json" "$KGEN_CACHE_DIR/ceilings.json"

if [ "$R" != 0 ]; then
  echo "== $(date +%T) advance to round $R ($(left) s left; no problem starts with less than $RESERVE s)"
  timeout -k 20 -s INT "$(left)" python3 $H advance --work "$WORK" --up-to "$R" --deadline "$deadline" \
    --reserve-s "$RESERVE" 2>&1 | quiet_ray
  echo "== harness exit ${PIPESTATUS[0]} (124/130: stopped by the time box; the same command continues)"
fi
[ -f "$KGEN_CACHE_DIR/ceilings.json" ] && cp "$KGEN_CACHE_DIR/ceilings.json" "$WORK/ceilings.json"

# what each problem has done, the table, what waits for a reply
python3 - "$WORK" > "$OUT/status.txt" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "benchmarks/real_model")
import harness
work = Path(sys.argv[1])
settings = harness.load_settings(work)
db = harness.open_results(work)
try:
    for name in settings.problems:
        run_id = (settings.runs or {}).get(name)
        done = harness.rounds_done(db, run_id)
        nxt = harness.round_dir(work, done + 1)
        state = ("reply there" if (nxt / f"{name}.reply.md").is_file() else "prompt waits for a reply"
                 if (nxt / f"{name}.prompt.md").is_file() else "no prompt")
        print(f"{name}: run {run_id}, {done} round(s) done" + ("" if done >= 3 else f"; round {done + 1}: {state}"))
finally:
    db.close()
PY
cat "$OUT/status.txt"
python3 $H table --work "$WORK" > "$OUT/table.md" 2>&1
echo "== the table"; cat "$OUT/table.md"
mapfile -t pending < <(python3 $H pending --work "$WORK")
if [ "${#pending[@]}" -gt 0 ]; then
  (cd "$(dirname "$WORK")" && tar czf "$OUT/prompts.tar.gz" "${pending[@]#"$(dirname "$WORK")/"}")
  echo "== ${#pending[@]} prompt file(s) wait for a reply: \$OUT/prompts.tar.gz"
fi

# the work folder, one consistent DB file, no caches
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" \
  "$WORK/results.db" 2>/dev/null
tar czf "$OUT/work-h100.tar.gz" -C "$(dirname "$WORK")" --exclude='__pycache__' "$(basename "$WORK")"
echo "== $(date +%T) done in $(( $(date +%s) - start )) s: \$OUT/work-h100.tar.gz ($(du -h "$OUT/work-h100.tar.gz" | cut -f1))"
