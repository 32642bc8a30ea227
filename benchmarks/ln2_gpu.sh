#!/usr/bin/env bash
# One device call, <= 7 minutes (give the run tool timeout_s 480): sweep the new layernorm starters
# cuda_persistent_l2ahead (whole next row prefetched into L2 by TMA) and cuda_persistent_regring (next row's
# head in registers, tail in L2) with benchmarks/sweep.py (trusted, do_bench medians, L2 flushed) beside
# the current best cuda_persistent_wsmem and triton_split_stats, on the same machine; then the best new
# setting through the judge (`kgen eval --json`, sandboxed, cold).
#   bash benchmarks/ln2_gpu.sh [TOTAL_S=420]
# Everything is written under /tmp/ln2 and packed at the end into $OUT/ln2-results.tar.gz (the device
# returns only a few files); the summary table is printed and also left as $OUT/ln2-summary.txt.
# Each step has its own timeout, cut to what is left of the total, so one stuck or failing step (a build
# error, a barrier that never completes) is reported and the rest still runs.
# The new starters take their tunables as runtime arguments, so each is built once (nvcc ~5-15 s beside
# g++ on the torch wrapper) and every further setting of a sweep reuses the build.
set -uo pipefail
TOTAL_S=${1:-420}
START=$(date +%s)
. benchmarks/device_call.sh
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache}
D=problems/starters/layernorm
R=/tmp/ln2
rm -rf "$R" && mkdir -p "$R"

summary() {  # every sweep row, the best per starter against wsmem measured in this call, the judge's verdict
  python3 - "$R" <<'EOF'
import glob, json, os, sys
r = sys.argv[1]
FLOOR = 0.190
best = {}
print(f"{'sweep':12s} {'setting':58s} {'ms':>8s} {'% floor':>8s} {'err':>9s}")
for p in sorted(glob.glob(f"{r}/*.json")):
    name = os.path.basename(p)[:-5]
    if name.startswith("eval-"):
        continue
    try:
        d = json.load(open(p))
    except ValueError:
        continue
    for x in d["rows"]:
        setting = " ".join(f"{k}={v}" for k, v in x["setting"].items())
        if "ms" in x:
            flag = "" if x.get("ok") else " WRONG"
            print(f"{name:12s} {setting:58s} {x['ms']:8.4f} {100 * FLOOR / x['ms']:7.0f}% {x['err']:9.1e}{flag}")
            if x.get("ok") and (d["starter"] not in best or x["ms"] < best[d["starter"]][0]):
                best[d["starter"]] = (x["ms"], setting)
        else:
            print(f"{name:12s} {setting:58s} failed: {x.get('error', '?')[:60]}")
base = best.get("cuda_persistent_wsmem.py", (None,))[0]
print()
print(f"{'starter':30s} {'best ms':>8s} {'% floor':>8s} {'vs wsmem':>9s}  setting")
for st, (ms, setting) in sorted(best.items(), key=lambda kv: kv[1][0]):
    vs = f"{base / ms:8.3f}x" if base else "        -"
    print(f"{st:30s} {ms:8.4f} {100 * FLOOR / ms:7.0f}% {vs}  {setting}")
for p in sorted(glob.glob(f"{r}/eval-*.json")):
    try:
        e = json.load(open(p))
    except ValueError:
        print(f"judge {os.path.basename(p)}: no JSON (see the .err file)")
        continue
    ms, err = e.get("runtime_ms"), e.get("norm_rel_err")
    print(f"judge {os.path.basename(p)[5:-5]}: {e.get('outcome')} {ms if ms is None else round(ms, 4)} ms"
          f" ({'-' if not ms else f'{100 * FLOOR / ms:.0f}%'} of floor) err {err}")
    if e.get("message"):
        print(f"  judge: {e['message'][:300]}")
print(f"floor {FLOOR} ms (x once, y once, weight+bias once at 3.0 TB/s); target <= 0.21 ms")
EOF
}

pack() {
  summary > "$R/summary.txt" 2>&1
  cp "$R/summary.txt" "$OUT/ln2-summary.txt"
  tar czf "$OUT/ln2-results.tar.gz" -C /tmp ln2
  echo "===== summary"
  cat "$R/summary.txt"
}
trap pack EXIT

left() { echo $((TOTAL_S - ($(date +%s) - START) - 15)); }   # 15 s kept for the summary and the tar

sweep() {  # sweep NAME TIMEOUT_S FILE --grid ...
  local name=$1 t=$2 file=$3; shift 3
  local l; l=$(left)
  [ "$t" -gt "$l" ] && t=$l
  if [ "$t" -lt 25 ]; then echo "SWEEP $name: skipped (${l}s left)"; return; fi
  echo "== sweep $name ($file $*) [${t}s, $(( $(date +%s) - START ))s in]"
  timeout "$t" python3 benchmarks/sweep.py layernorm "$file" "$@" --json "$R/$name.json" --budget-s $((t - 25)) \
    > "$R/$name.log" 2>&1
  local rc=$?
  grep -v -E "^\s+(File|raise|\^)" "$R/$name.log" | tail -14
  [ -f "$R/$name.json" ] || echo "SWEEP $name: no result (exit $rc; timed out or failed, see $name.log)"
}

best() {  # best STEM JSON... -> $R/best-<stem>.py with the fastest correct setting of those sweeps
  python3 - "$R" "$@" <<'EOF'
import json, os, sys
sys.path.insert(0, os.getcwd())
from kgen.proposers.offline import apply_changes, find_tunables
r, stem, names = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
for n in names:
    p = f"{r}/{n}.json"
    if os.path.exists(p):
        rows += [x for x in json.load(open(p))["rows"] if x.get("ok")]
if not rows:
    print(f"BEST {stem}: no correct setting in the sweeps")
    sys.exit(1)
b = min(rows, key=lambda x: x["ms"])
src = open(f"problems/starters/layernorm/{stem}.py").read()
tun = {t.name: t for t in find_tunables(src)}
open(f"{r}/best-{stem}.py", "w").write(apply_changes(src, [(tun[k], v) for k, v in b["setting"].items()]))
open(f"{r}/best-{stem}.ms", "w").write(f"{b['ms']}\n")
print(f"BEST {stem}: {b['setting']} sweep {b['ms']:.4f} ms ({100 * 0.190 / b['ms']:.0f}% of the floor) err {b['err']:.1e}")
EOF
}

judge() {  # judge STEM TIMEOUT_S
  local stem=$1 t=$2 f="$R/best-$1.py" l
  l=$(left)
  [ "$t" -gt "$l" ] && t=$l
  [ -f "$f" ] || { echo "JUDGE $stem: skipped (no best setting)"; return; }
  if [ "$t" -lt 60 ]; then echo "JUDGE $stem: skipped (${l}s left)"; return; fi
  echo "== judge $stem [${t}s, $(( $(date +%s) - START ))s in]"
  timeout "$t" python3 -m kgen eval layernorm "$f" --json --no-baselines --timeout $((t - 10)) \
    > "$R/eval-$stem.json" 2> "$R/eval-$stem.err" || echo "JUDGE $stem: exit $? (see eval-$stem.err)"
  tail -3 "$R/eval-$stem.err"
}

# 1. the new starters: each sweep is one build, then runtime settings (--extra: single combinations)
sweep l2a 110 cuda_persistent_l2ahead.py --grid THREADS=512,1024 --grid PF_PCT=0,50,75,100 \
  --extra "PF_EARLY=0" --extra "PF_BULK=0" --extra "PF_LAST=1" --extra "PF_EARLY=0 PF_LAST=1" --extra "WB_TMA=0"
sweep ring 95 cuda_persistent_regring.py --grid THREADS=256 --grid HEAD=6,8,10 --grid PF_TAIL=0,1 \
  --extra "THREADS=512 HEAD=2" --extra "THREADS=512 HEAD=3" --extra "THREADS=512 HEAD=4" \
  --extra "PF_LAST=1" --extra "PF_BULK=0"
# 2. the current best on this machine (a build of ~40 s: its CUDA file includes torch)
sweep wsmem 75 cuda_persistent_wsmem.py --grid PREFETCH4=2048
# 3. the judge on the best new setting
best cuda_persistent_l2ahead l2a
best cuda_persistent_regring ring
first=$(python3 - "$R" <<'EOF'
import os, sys
r = sys.argv[1]
ms = {}
for stem in ("cuda_persistent_l2ahead", "cuda_persistent_regring"):
    p = f"{r}/best-{stem}.ms"
    if os.path.exists(p):
        ms[stem] = float(open(p).read())
print(min(ms, key=ms.get) if ms else "none")
EOF
)
[ "$first" != none ] && judge "$first" 100
# 4. the old Triton best, while time is left
sweep split-stats 35 triton_split_stats.py --grid STATS_WARPS=8
echo "done in $(( $(date +%s) - START ))s"
