#!/usr/bin/env bash
# One device call (<= 7 min of steps; run it with the 600 s limit): the 3xFP16 space-to-depth conv starters
# (conv2d/triton_3xfp16_s2d.py, conv_relu_maxpool/triton_3xfp16_s2d_then_pool.py) beside the current best
# ones (the 3xTF32 s2d starters as written), same machine, same timing (benchmarks/sweep.py: do_bench
# median, L2 flushed; normwise error of the x1 and x100 inputs vs float64):
#   1. conv2d: the TF32 baseline, then 15 settings of the FP16 starter (MODE x tile x A_L1 / A_REGS / stages)
#   2. conv_relu_maxpool: the TF32 baseline, then the FP16 starter as written and at the two best conv2d
#      settings (the best one also with POOL_BLOCK 1024)
#   3. conv2d: around the best of 1 (stages -1/+1, A_L1 and A_REGS flipped), if time is left
#   4. the fastest correct setting of each problem written out as a starter file and judged
#      (`kgen eval --json --no-baselines`: sandboxed, cold; eager 0.874 / 1.066 ms, compile 0.694 / 0.749)
#   bash benchmarks/conv2_gpu.sh [TOTAL_S=420]
#     -> $OUT/conv2-results.tar.gz (every sweep's JSON and log, best-*.py, judge JSON/err, summary.txt)
#     -> $OUT/conv2-summary.txt, and the summary printed last
# Each step has its own timeout (sweeps keep RESERVE seconds for the judge) and the script goes on when
# one fails or runs out of time.
set -uo pipefail
start=$(date +%s)
TOTAL=${1:-420}
. benchmarks/device_call.sh
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache}
export R=/tmp/conv2-results; rm -rf "$R"; mkdir -p "$R"
RESERVE=150          # seconds kept for the two judged runs and the summary
left() { echo $(( TOTAL - ($(date +%s) - start) )); }
C2=problems/starters/conv2d
CRM=problems/starters/conv_relu_maxpool

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
  python3 - "$@" <<'EOF'
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
EOF
}

around() {  # around FILE SETTING JSON -> --combo args: NUM_STAGES -1/+1, A_L1 and A_REGS flipped (FILE's
            # defaults for what SETTING leaves out), less the settings JSON's rows already measured
  python3 - "$1" "$2" "$3" <<'EOF'
import json, os, sys
sys.path.insert(0, os.getcwd())
from kgen.proposers.offline import find_tunables
defaults = {t.name: t.value for t in find_tunables(open(sys.argv[1]).read())}
full = dict(defaults, **{k: int(v) for k, v in (kv.split("=") for kv in sys.argv[2].split(",") if kv)})
done = [dict(defaults, **r["setting"]) for r in json.load(open(sys.argv[3]))["rows"]] if os.path.exists(sys.argv[3]) else []
keys = ("MODE", "BLOCK_M", "BLOCK_N", "NSUB", "NUM_WARPS", "NUM_STAGES", "A_L1", "A_REGS", "MAXNREG")
out = []
for k, v in (("NUM_STAGES", full["NUM_STAGES"] - 1), ("NUM_STAGES", full["NUM_STAGES"] + 1),
             ("A_L1", 1 - full["A_L1"]), ("A_REGS", 1 - full["A_REGS"])):
    c = dict(full, **{k: v})
    if c["NUM_STAGES"] >= 2 and c not in done:
        out.append(",".join(f"{a}={c[a]}" for a in keys))
print(" ".join(f"--combo {c}" for c in out))
EOF
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
# 1. conv2d: baseline, then the FP16 starter (as written first: MODE 2, 128 rows, 8 warps, 4 stages)
sweep c2-tf32 10 conv2d triton_3xtf32_s2d.py
sweep c2-fp16 100 conv2d triton_3xfp16_s2d.py --combo MODE=2 --combo MODE=1 \
  --combo MODE=2,BLOCK_M=64,NUM_WARPS=4 --combo MODE=1,BLOCK_M=64,NUM_WARPS=4 \
  --combo MODE=2,A_L1=1 --combo MODE=2,A_REGS=1 --combo MODE=1,A_REGS=1 --combo MODE=1,NUM_WARPS=4 \
  --combo MODE=1,BLOCK_M=256,NUM_STAGES=3 --combo MODE=2,BLOCK_M=64,NUM_WARPS=4,A_L1=1 \
  --combo MODE=2,BLOCK_M=64,NUM_WARPS=4,A_REGS=1 --combo MODE=3,BLOCK_M=64,NUM_WARPS=4,A_REGS=1 \
  --combo MODE=3,A_REGS=1,NUM_STAGES=3 --combo MODE=2,NUM_STAGES=3 --combo MODE=1,BLOCK_N=64,NSUB=2
b1=$(best best-conv2d 1 $C2/triton_3xfp16_s2d.py "$R/c2-fp16.json")
b2=$(best unused 2 $C2/triton_3xfp16_s2d.py "$R/c2-fp16.json")
echo "== conv2d best: ${b1:-none}; second: ${b2:-none}"
# 2. conv_relu_maxpool: baseline, then the new starter as written and at the best conv2d settings
sweep crm-tf32 10 conv_relu_maxpool triton_3xtf32_s2d_then_pool.py
combos=(--combo MODE=2)             # as written
[ -n "$b1" ] && [ "$b1" != MODE=2 ] && combos+=(--combo "$b1")
[ -n "$b1" ] && combos+=(--combo "$b1,POOL_BLOCK=1024")
[ -n "$b2" ] && [ "$b2" != MODE=2 ] && combos+=(--combo "$b2")
sweep crm-fp16 45 conv_relu_maxpool triton_3xfp16_s2d_then_pool.py "${combos[@]}"
bp=$(best best-conv_relu_maxpool 1 $CRM/triton_3xfp16_s2d_then_pool.py "$R/crm-fp16.json")
echo "== conv_relu_maxpool best: ${bp:-none}"
# 3. conv2d around its best, if time is left
if [ -n "$b1" ]; then
  # shellcheck disable=SC2046
  sweep c2-fp16-around 40 conv2d triton_3xfp16_s2d.py $(around $C2/triton_3xfp16_s2d.py "$b1" "$R/c2-fp16.json")
  b1=$(best best-conv2d 1 $C2/triton_3xfp16_s2d.py "$R/c2-fp16.json" "$R/c2-fp16-around.json")
  echo "== conv2d best after step 3: ${b1:-none}"
fi
# 4. the judge
RESERVE=0
judge conv2d best-conv2d
judge conv_relu_maxpool best-conv_relu_maxpool
} 2>&1 | tee "$R/steps.log"

python3 - "$R" <<'EOF' | tee "$R/summary.txt"
import glob, json, os, sys
r, floor = sys.argv[1], 0.155
base = {}
for prob, name in (("conv2d", "c2-tf32"), ("conv_relu_maxpool", "crm-tf32")):
    try:
        rows = [x for x in json.load(open(f"{r}/{name}.json"))["rows"] if x.get("ms")]
        base[prob] = rows[0]["ms"] if rows else None
    except (OSError, ValueError):
        base[prob] = None
print(f"floor {floor} ms; target <= 0.31 ms; judged before: conv2d 0.387, conv_relu_maxpool 0.431 (TF32 s2d)")
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
          f"eager {d['eager_ms']:.4f} ms" + (f", TF32 s2d baseline {b:.4f} ms" if b else ""))
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
EOF
cp "$R/summary.txt" "$OUT/conv2-summary.txt"
tar czf "$OUT/conv2-results.tar.gz" -C /tmp conv2-results
echo "== done in $(( $(date +%s) - start ))s"
