#!/usr/bin/env bash
# One device call (<= 240 s of steps; run it with a 330 s limit): conv2d and conv_relu_maxpool with the conv
# reading x DIRECTLY (no 43 us space-to-depth pre-pass: the fp32 x is loaded at the s2d index by 8-byte
# cp.async and split into fp16 hi/lo in registers, a register-A wgmma per K step):
#   problems/starters/conv2d/triton_3xfp16_direct_onedot.py and
#   problems/starters/conv_relu_maxpool/triton_3xfp16_direct_lagpool.py
# beside the current best of each as written (conv2d triton_3xfp16_s2d_onedot.py, 0.279 ms judged;
# conv_relu_maxpool triton_3xfp16_s2d_onedot_lagpool.py, 0.319 ms judged), same machine, same timing
# (benchmarks/sweep.py: do_bench median, L2 flushed; normwise error of the x1 and x100 inputs vs float64):
#   1. conv2d: the baseline as written; direct as written (PRE 0), its PRE 1 (the old pre-pass path in the
#      same file), then one knob at a time: stages, 8 warps, BLOCK_M 256 / 64, KX 32, LOLO 1
#   2. conv_relu_maxpool: the same (baseline, direct PRE 0 / PRE 1, stages, warps, BLOCK_M, KX, LAG)
#   3. judged (`python3 -m kgen eval PROBLEM FILE --json --no-baselines`: sandboxed, cold): the fastest correct
#      PRE 0 setting of each problem written out (crm first: the target is there)
#   bash benchmarks/kernel_round_crm6.sh [TOTAL_S=240]
#     -> $OUT/crm6-results.tar.gz (every sweep's JSON and log, best-*.py, judge JSON/err, summary.txt)
#     -> $OUT/crm6-summary.txt, and the summary printed last
# Dry run off the device (small size, Triton's interpreter):
#   KGEN_NO_BUNDLE=1 OUT=/tmp/crm6-dry PATH=$PWD/.venv/bin:$PATH bash benchmarks/kernel_round_crm6.sh 240
# Each step has its own timeout (sweeps keep RESERVE seconds for the judge) and the script goes on when one
# fails or runs out of time. The fused pool's counter waits are bounded (~1 s per program): a broken
# schedule shows as a WRONG row or an incorrect verdict, not as a hung GPU.
set -uo pipefail
start=$(date +%s)
TOTAL=${1:-240}
. benchmarks/device_call.sh
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache}
export R=/tmp/crm6-results; rm -rf "$R"; mkdir -p "$R"
RESERVE=95           # seconds kept for the two judged runs and the summary
left() { echo $(( TOTAL - ($(date +%s) - start) )); }
CV=problems/starters/conv2d
CRM=problems/starters/conv_relu_maxpool
CB=triton_3xfp16_s2d_onedot.py
CD=triton_3xfp16_direct_onedot.py
LB=triton_3xfp16_s2d_onedot_lagpool.py
LD=triton_3xfp16_direct_lagpool.py

sweep() {  # sweep NAME BUDGET_S PROBLEM FILE [--grid ... | --combo ...]
  local name=$1 budget=$2; shift 2
  local t=$(( $(left) - RESERVE ))
  if [ "$t" -lt 25 ]; then echo "== skip sweep $name: ${t}s left before the judge's reserve"; return; fi
  [ "$budget" -gt $(( t - 20 )) ] && budget=$(( t - 20 ))
  echo "== $(date +%T) sweep $name: $* (budget ${budget}s, $(left)s left)"
  timeout "$(( budget + 35 < t ? budget + 35 : t ))" python3 benchmarks/sweep.py "$@" --budget-s "$budget" \
    --json "$R/$name.json" > "$R/$name.log" 2>&1 || echo "   (sweep $name: exit $?)"
  grep -v -E "^\s+(File|raise|\^|~)|^Traceback|^\s*$" "$R/$name.log" | tail -16
}

best() {  # best OUT_NAME SOURCE KEY=VAL JSON... -> the fastest correct setting whose KEY is VAL (as --combo
          # text) and $R/OUT_NAME.py = SOURCE with that setting; prints nothing when none
  python3 - "$@" <<'PY'
import json, os, sys
sys.path.insert(0, os.getcwd())
from kgen.proposers.offline import apply_changes, find_tunables
name, path, flt, jsons = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
src = open(path).read()
tun = {t.name: t for t in find_tunables(src)}
key, val = flt.split("=")
rows = []
for j in jsons:
    if os.path.exists(j):
        rows += [r for r in json.load(open(j))["rows"] if r.get("ok")]
rows = [r for r in rows if r["setting"].get(key, tun[key].value) == int(val)]
if not rows:
    sys.exit(0)
b = min(rows, key=lambda r: r["ms"])
setting = {k: v for k, v in b["setting"].items() if k in tun and v != tun[k].value}
open(os.path.join(os.environ["R"], name + ".py"), "w").write(apply_changes(src, [(tun[k], v) for k, v in setting.items()]))
print(",".join(f"{k}={v}" for k, v in setting.items()) or "(as written)")
PY
}

judge() {  # judge PROBLEM NAME: kgen eval of $R/NAME.py
  local problem=$1 name=$2 f="$R/$2.py" t; t=$(( $(left) - 10 ))
  [ -f "$f" ] || { echo "== judge $name: skipped (no such file: no correct setting in the sweeps)"; return; }
  if [ "$t" -lt 35 ]; then echo "== judge $name: skipped (${t}s left)"; return; fi
  [ "$t" -gt 90 ] && t=90
  echo "== $(date +%T) judge $problem $name (timeout ${t}s)"
  timeout "$t" python3 -m kgen eval "$problem" "$f" --json --no-baselines --timeout $(( t - 8 )) \
    > "$R/judge-$name.json" 2> "$R/judge-$name.err" || echo "   (judge $name: exit $?)"
  tail -3 "$R/judge-$name.err"
}

{
# 1. conv_relu_maxpool first (the target is there): the baseline as written (0.3164 swept, 0.319 judged), then
#    direct as written, its PRE 1 (the old conv path, same file: what the direct loads save), one knob at a time
sweep crm-base 15 conv_relu_maxpool $LB
sweep crm6-direct 62 conv_relu_maxpool $LD --combo PRE=0 --combo PRE=1 --combo NUM_STAGES=3 \
  --combo NUM_WARPS=8 --combo BLOCK_M=256,NUM_WARPS=8,NUM_STAGES=3 --combo KX=32,NUM_STAGES=3 \
  --combo NUM_STAGES=5 --combo LAG=24 --combo LOLO=1 --combo BLOCK_M=64
# 2. conv2d: the baseline as written (0.2777 swept, 0.279 judged), direct as written, PRE 1, knobs
sweep conv-base 12 conv2d $CB
sweep conv6-direct 50 conv2d $CD --combo PRE=0 --combo PRE=1 --combo NUM_STAGES=3 --combo NUM_WARPS=8 \
  --combo BLOCK_M=256,NUM_WARPS=8,NUM_STAGES=3 --combo KX=32,NUM_STAGES=3 --combo NUM_STAGES=5 \
  --combo BLOCK_M=256,NUM_WARPS=8 --combo LOLO=1
bl=$(best best-crm-direct $CRM/$LD PRE=0 "$R/crm6-direct.json")
echo "== conv_relu_maxpool direct best (PRE 0): ${bl:-none}"
bc=$(best best-conv-direct $CV/$CD PRE=0 "$R/conv6-direct.json")
echo "== conv2d direct best (PRE 0): ${bc:-none}"
# 3. the judge: the best PRE 0 setting of each problem, written out
RESERVE=0
judge conv_relu_maxpool best-crm-direct
judge conv2d best-conv-direct
} 2>&1 | tee "$R/steps.log"

python3 - "$R" <<'PY' | tee "$R/summary.txt"
import glob, json, os, sys
r = sys.argv[1]
base = {}
for prob, name in (("conv_relu_maxpool", "crm-base"), ("conv2d", "conv-base")):
    try:
        rows = [x for x in json.load(open(f"{r}/{name}.json"))["rows"] if x.get("ms")]
        base[prob] = rows[0]["ms"] if rows else None
    except (OSError, ValueError):
        base[prob] = None
print("judged before: conv_relu_maxpool 0.319 ms (onedot lagpool, NUM_STAGES 4; target <= 0.31), "
      "conv2d 0.279 (onedot, NUM_STAGES 4)")
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
            print(f"   {st:50s} {x['ms']:7.4f} ms{vs}  err {x['err']:.1e} {'ok' if x['ok'] else 'WRONG'}")
        else:
            print(f"   {st:50s} failed: {x.get('error', '')[:120]}")
for path in sorted(glob.glob(f"{r}/judge-*.json")):
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        print(f"{os.path.basename(path)}: unreadable")
        continue
    ms, kp = d.get("runtime_ms"), (d.get("details") or {}).get("kernel_profile") or {}
    cupti = kp.get("gpu_us")
    print(f"== {os.path.basename(path)[6:-5]} (judge): {d.get('outcome')} "
          + (f"{ms:.4f} ms" if ms else "untimed")
          + (f", CUPTI {cupti / 1e3:.4f} ms" if cupti else "")
          + f", normwise {d.get('norm_rel_err')} {(d.get('message') or '')[:300]}")
PY
cp "$R/summary.txt" "$OUT/crm6-summary.txt"
tar czf "$OUT/crm6-results.tar.gz" -C /tmp crm6-results
echo "== done in $(( $(date +%s) - start ))s"
