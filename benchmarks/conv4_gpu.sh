#!/usr/bin/env bash
# One device call (<= 7 min of steps; run it with the 600 s limit): the one-dot 3xFP16 space-to-depth conv
# starters (conv2d/triton_3xfp16_s2d_onedot.py: the three fp16 products side by side along a virtual K, one
# async dot per step per channel tile, `wgmma.wait_group 2` instead of a `wait_group 0` after every dot;
# conv_relu_maxpool/triton_3xfp16_s2d_onedot_pool.py: the same conv + ReLU, then the pool kernel walking
# the planes last first) beside the current bests as written (conv2d/triton_3xfp16_s2d_async.py 0.325 ms
# judged, conv_relu_maxpool/triton_3xfp16_s2d_async_pool.py 0.385, on 2026-11-26), same machine, same
# timing (benchmarks/sweep.py: do_bench median, L2 flushed; normwise error of the x1 and x100 inputs vs
# float64):
#   1. conv2d: the baseline, then the onedot starter (as written first, then by expected value)
#   2. conv_relu_maxpool: the baseline, then the onedot pool starter as written, POOL_REV 0, and at the
#      best conv2d setting of step 1
#   3. conv2d: around its best (stages +1/-1, KSTEP 64 <-> 128), if time is left
#   4. the fastest correct setting of each new starter written out as a starter file and judged
#      (`python3 -m kgen eval PROBLEM FILE --json --no-baselines`: sandboxed, cold)
#   bash benchmarks/conv4_gpu.sh [TOTAL_S=420]
#     -> $OUT/conv4-results.tar.gz (every sweep's JSON and log, best-*.py, judge JSON/err, summary.txt)
#     -> $OUT/conv4-summary.txt, and the summary printed last
# Dry run off the device (small size, Triton's interpreter):
#   KGEN_NO_BUNDLE=1 OUT=/tmp/conv4-dry PATH=$PWD/.venv/bin:$PATH bash benchmarks/conv4_gpu.sh 400
# Each step has its own timeout (sweeps keep RESERVE seconds for the judge) and the script goes on when
# one fails or runs out of time.
set -uo pipefail
start=$(date +%s)
TOTAL=${1:-420}
. benchmarks/device_call.sh
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache}
export R=/tmp/conv4-results; rm -rf "$R"; mkdir -p "$R"
RESERVE=150          # seconds kept for the two judged runs and the summary
left() { echo $(( TOTAL - ($(date +%s) - start) )); }
C2=problems/starters/conv2d
CRM=problems/starters/conv_relu_maxpool
O2=triton_3xfp16_s2d_onedot.py
OP=triton_3xfp16_s2d_onedot_pool.py

sweep() {  # sweep NAME BUDGET_S PROBLEM FILE [--grid ... | --combo ...]
  local name=$1 budget=$2; shift 2
  local t=$(( $(left) - RESERVE ))
  if [ "$t" -lt 30 ]; then echo "== skip sweep $name: ${t}s left before the judge's reserve"; return; fi
  [ "$budget" -gt $(( t - 25 )) ] && budget=$(( t - 25 ))
  echo "== $(date +%T) sweep $name: $* (budget ${budget}s, $(left)s left)"
  timeout "$(( budget + 40 < t ? budget + 40 : t ))" python3 benchmarks/sweep.py "$@" --budget-s "$budget" \
    --json "$R/$name.json" > "$R/$name.log" 2>&1 || echo "   (sweep $name: exit $?)"
  grep -v -E "^\s+(File|raise|\^|~)|^Traceback|^\s*$" "$R/$name.log" | tail -22
}

best() {  # best OUT_NAME NTH SOURCE JSON... -> the NTH fastest correct setting as --combo text (NTH=1: also
          # writes $R/OUT_NAME.py, SOURCE with that setting); prints nothing when there is none
  python3 - "$@" <<'PY'
import json, os, sys
sys.path.insert(0, os.getcwd())
from kgen.proposers.offline import apply_changes, find_tunables
name, nth, path, jsons = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
rows = []
for j in jsons:
    if os.path.exists(j):
        rows += [r for r in json.load(open(j))["rows"] if r.get("ok")]
rows.sort(key=lambda r: r["ms"])
seen, uniq = set(), []
for r in rows:
    key = tuple(sorted(r["setting"].items()))
    if key not in seen:
        seen.add(key)
        uniq.append(r)
if len(uniq) < nth:
    sys.exit(0)
b = uniq[nth - 1]
if nth == 1:
    src = open(path).read()
    tun = {t.name: t for t in find_tunables(src)}
    setting = {k: v for k, v in b["setting"].items() if k in tun}
    open(os.path.join(os.environ["R"], name + ".py"), "w").write(apply_changes(src, [(tun[k], v) for k, v in setting.items()]))
print(",".join(f"{k}={v}" for k, v in b["setting"].items()))
PY
}

around() {  # around FILE SETTING JSON... -> --combo args: NUM_STAGES -1/+1, KSTEP 64 <-> 128 (FILE's defaults
            # for what SETTING leaves out), less the settings the JSONs' rows already measured
  python3 - "$@" <<'PY'
import json, os, sys
sys.path.insert(0, os.getcwd())
from kgen.proposers.offline import find_tunables
defaults = {t.name: t.value for t in find_tunables(open(sys.argv[1]).read())}
full = dict(defaults, **{k: int(v) for k, v in (kv.split("=") for kv in sys.argv[2].split(",") if kv)})
done = []
for j in sys.argv[3:]:
    if os.path.exists(j):
        done += [dict(defaults, **r["setting"]) for r in json.load(open(j))["rows"]]
keys = ("SPLIT", "BLOCK_N", "BLOCK_M", "KSTEP", "NUM_WARPS", "NUM_STAGES")
out = []
for k, v in (("NUM_STAGES", full["NUM_STAGES"] + 1), ("NUM_STAGES", full["NUM_STAGES"] - 1),
             ("KSTEP", 128 if full["KSTEP"] == 64 else 64)):
    c = dict(full, **{k: v})
    # shared memory per stage (fp16): A BLOCK_M x KSTEP, W channels x KSTEP; the H100 has 227 KB per block
    ch = c["BLOCK_N"] * (3 if c["SPLIT"] else 2) // 2
    smem = c["NUM_STAGES"] * 2 * c["KSTEP"] * (c["BLOCK_M"] + ch)
    if c["NUM_STAGES"] >= 2 and smem <= 227 * 1024 and c not in done:
        out.append(",".join(f"{a}={c[a]}" for a in keys))
print(" ".join(f"--combo {c}" for c in out))
PY
}

judge() {  # judge PROBLEM NAME: kgen eval of $R/NAME.py
  local problem=$1 name=$2 f="$R/$2.py" t; t=$(( $(left) - 15 ))
  [ -f "$f" ] || { echo "== judge $name: skipped (no correct setting in the sweeps)"; return; }
  if [ "$t" -lt 40 ]; then echo "== judge $name: skipped (${t}s left)"; return; fi
  [ "$t" -gt 150 ] && t=150
  echo "== $(date +%T) judge $problem $name (timeout ${t}s)"
  timeout "$t" python3 -m kgen eval "$problem" "$f" --json --no-baselines --timeout $(( t - 10 )) \
    > "$R/judge-$name.json" 2> "$R/judge-$name.err" || echo "   (judge $name: exit $?)"
  tail -3 "$R/judge-$name.err"
}

{
# 1. conv2d: the current best as written (async, MODE 1, WIDE 1: 0.320 swept), then the onedot starter:
#    as written (128 x (64 + 32), KSTEP 64, 4 warps, 3 stages), then by expected value: 4 stages (one
#    program per SM, deeper queue), 256 rows / 8 warps (W bytes per pixel halved), KSTEP 128 with 2
#    stages, one 128-channel dot (8 warps), 2 stages, 64 rows. RESERVE is raised meanwhile so that step 2
#    keeps ~80 s.
sweep c2-base 20 conv2d triton_3xfp16_s2d_async.py
RESERVE=230
sweep c2-onedot 110 conv2d $O2 --combo SPLIT=1 --combo NUM_STAGES=4 --combo BLOCK_M=256,NUM_WARPS=8 \
  --combo KSTEP=128,NUM_STAGES=2 --combo SPLIT=0,BLOCK_N=128,NUM_WARPS=8 --combo NUM_STAGES=2 \
  --combo BLOCK_M=64 --combo KSTEP=32,NUM_STAGES=5
J2=("$R/c2-onedot.json")
b1=$(best best-conv2d 1 $C2/$O2 "${J2[@]}")
echo "== conv2d best: ${b1:-none}"
# 2. conv_relu_maxpool: the current best as written (async_pool, separate pool kernel: 0.385 judged), then
#    the onedot pool starter as written (POOL_REV 1), POOL_REV 0 (what walking the planes backwards saves),
#    and at the best conv2d setting if that is not the default
RESERVE=150
sweep crm-base 20 conv_relu_maxpool triton_3xfp16_s2d_async_pool.py
combos=(--combo POOL_REV=1 --combo POOL_REV=0)   # the first: as written
[ -n "$b1" ] && [ "$b1" != SPLIT=1 ] && combos+=(--combo "$b1")
combos+=(--combo POOL_BLOCK=1024)
sweep crm-onedot 75 conv_relu_maxpool $OP "${combos[@]}"
bp=$(best best-conv_relu_maxpool 1 $CRM/$OP "$R/crm-onedot.json")
echo "== conv_relu_maxpool best: ${bp:-none}"
# 3. conv2d: around its best, if time is left
if [ -n "$b1" ]; then
  # shellcheck disable=SC2046
  sweep c2-around 45 conv2d $O2 $(around $C2/$O2 "$b1" "${J2[@]}")
  J2+=("$R/c2-around.json")
  b1=$(best best-conv2d 1 $C2/$O2 "${J2[@]}")
  echo "== conv2d best after step 3: ${b1:-none}"
fi
# 4. the judge
RESERVE=0
judge conv2d best-conv2d
judge conv_relu_maxpool best-conv_relu_maxpool
} 2>&1 | tee "$R/steps.log"

python3 - "$R" <<'PY' | tee "$R/summary.txt"
import glob, json, os, sys
r, floor = sys.argv[1], 0.155
base = {}
for prob, name in (("conv2d", "c2-base"), ("conv_relu_maxpool", "crm-base")):
    try:
        rows = [x for x in json.load(open(f"{r}/{name}.json"))["rows"] if x.get("ms")]
        base[prob] = rows[0]["ms"] if rows else None
    except (OSError, ValueError):
        base[prob] = None
print(f"floor {floor} ms; target <= 0.31 ms; judged before: conv2d 0.325, conv_relu_maxpool 0.385 (3xFP16 s2d async)")
for path in sorted(glob.glob(f"{r}/*.json")):
    if os.path.basename(path).startswith("judge-"):
        continue
    try:
        d = json.load(open(path))
    except (OSError, ValueError) as exc:
        print(f"{os.path.basename(path)}: unreadable ({exc})")
        continue
    b = base.get(d["problem"])
    print(f"-- {os.path.basename(path)[:-5]}: {d['problem']}/{d['starter']} on {d['device']}, triton {d['triton']}, "
          f"eager {d['eager_ms']:.4f} ms" + (f", baseline {b:.4f} ms" if b else ""))
    for x in sorted(d["rows"], key=lambda x: x.get("ms") or 1e9):
        st = " ".join(f"{k}={v}" for k, v in x["setting"].items()) or "(as written)"
        if "ms" in x:
            vs = f" {b / x['ms']:5.2f}x base" if b else ""
            print(f"   {st:62s} {x['ms']:7.4f} ms {100 * floor / x['ms']:3.0f}% floor{vs}  err {x['err']:.1e} "
                  f"{'ok' if x['ok'] else 'WRONG'}")
        else:
            print(f"   {st:62s} failed: {x.get('error', '')[:120]}")
for path in sorted(glob.glob(f"{r}/judge-*.json")):
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        print(f"{os.path.basename(path)}: unreadable")
        continue
    ms, kp = d.get("runtime_ms"), (d.get("details") or {}).get("kernel_profile") or {}
    cupti = kp.get("gpu_us")
    print(f"== {os.path.basename(path)[6:-5]} (judge): {d.get('outcome')} "
          + (f"{ms:.4f} ms ({100 * floor / ms:.0f}% of floor)" if ms else "untimed")
          + (f", CUPTI {cupti / 1e3:.4f} ms" if cupti else "")
          + f", normwise {d.get('norm_rel_err')} {(d.get('message') or '')[:300]}")
PY
cp "$R/summary.txt" "$OUT/conv4-summary.txt"
tar czf "$OUT/conv4-results.tar.gz" -C /tmp conv4-results
echo "== done in $(( $(date +%s) - start ))s"
