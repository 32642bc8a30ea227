#!/usr/bin/env bash
# One device call (issue 25, <= 8 min): the space-to-depth 3xTF32 conv starters on the H100.
#   1. benchmarks/sweep.py over small grids of each new starter, next to the current best starter
#      (same machine, same do_bench timing) -> $OUT/conv-*.json, $OUT/conv-sweeps.txt
#   2. `kgen eval --json` of each new starter at its default tunables (the judge's verdict) -> $OUT/conv-eval-*.json
#   3. a summary: ms, % of the 0.155 ms floor, normwise error -> $OUT/conv-summary.txt
# Each step runs under its own timeout and the script goes on when one fails or runs out of time.
set -uo pipefail
start=$(date +%s)
. benchmarks/device_call.sh
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache}
left() { echo $(( 470 - ($(date +%s) - start) )); }
FLOOR=0.155

sweep() {  # sweep NAME BUDGET_S PROBLEM FILE [--grid ...]
  local name=$1 budget=$2; shift 2
  local t; t=$(left)
  if [ "$t" -lt 30 ]; then echo "== skip sweep $name: ${t}s left"; return; fi
  echo "== sweep $name ($* ; budget ${budget}s, ${t}s left)"
  timeout "$(( budget + 60 < t ? budget + 60 : t ))" python3 benchmarks/sweep.py "$@" --budget-s "$budget" \
    --json "$OUT/conv-$name.json" 2>&1 | grep -v -E "^\s+File |^Traceback" || echo "   (sweep $name failed or timed out)"
}

{
sweep padded-baseline 15 conv2d triton_3xtf32_padded.py
sweep s2d 80 conv2d triton_3xtf32_s2d.py --grid BLOCK_M=64,128 --grid NUM_WARPS=4,8 --grid NUM_STAGES=3,4
sweep s2d-n64 20 conv2d triton_3xtf32_s2d.py --grid BLOCK_N=64 --grid NSUB=2 --grid BLOCK_M=64,128 --grid NUM_WARPS=8
sweep then-pool-baseline 15 conv_relu_maxpool triton_3xtf32_conv_then_pool.py
sweep s2d-then-pool 40 conv_relu_maxpool triton_3xtf32_s2d_then_pool.py --grid BLOCK_M=64,128 --grid NUM_WARPS=4,8
} | tee "$OUT/conv-sweeps.txt"

for pf in conv2d:conv2d/triton_3xtf32_s2d \
          conv_relu_maxpool:conv_relu_maxpool/triton_3xtf32_s2d_then_pool; do
  problem=${pf%%:*}; file=problems/starters/${pf#*:}.py; name=$(basename "$file" .py)
  t=$(left)
  if [ "$t" -lt 40 ]; then echo "== skip kgen eval $problem $name: ${t}s left"; continue; fi
  echo "== kgen eval $problem $name (${t}s left)"
  timeout "$t" python3 -m kgen eval "$problem" "$file" --json --timeout "$t" > "$OUT/conv-eval-$name.json" \
    2> "$OUT/conv-eval-$name.err" || echo "   (kgen eval failed: tail of $OUT/conv-eval-$name.err below)"
  tail -3 "$OUT/conv-eval-$name.err"
done

echo "== summary (floor $FLOOR ms; target <= 0.31 ms)" | tee "$OUT/conv-summary.txt"
python3 - "$OUT" "$FLOOR" <<'EOF' | tee -a "$OUT/conv-summary.txt"
import glob, json, os, sys
out, floor = sys.argv[1], float(sys.argv[2])
for path in sorted(glob.glob(os.path.join(out, "conv-*.json"))):
    try:
        d = json.load(open(path))
    except (OSError, ValueError) as exc:
        print(f"{os.path.basename(path)}: unreadable ({exc})")
        continue
    if "rows" in d:  # a sweep
        good = sorted((r for r in d["rows"] if r.get("ok")), key=lambda r: r["ms"])
        bad = sum(1 for r in d["rows"] if not r.get("ok"))
        if good:
            b = good[0]
            print(f"{os.path.basename(path)} {d['problem']}/{d['starter']}: best {b['setting'] or '(as written)'} {b['ms']:.4f} ms "
                  f"({100 * floor / b['ms']:.0f}% of floor), err {b['err']:.1e}, eager {d['eager_ms']:.4f} ms; "
                  f"{len(good)} ok, {bad} failed/wrong")
        else:
            print(f"{os.path.basename(path)} {d['problem']}/{d['starter']}: no correct combination ({bad} failed/wrong)")
    else:  # kgen eval --json
        ms = d.get("runtime_ms")
        shown = f"{ms:.4f} ms ({100 * floor / ms:.0f}% of floor)" if ms else "untimed"
        print(f"{os.path.basename(path)} (kgen eval): {d.get('outcome')} {shown}, normwise {d.get('norm_rel_err')}, "
              f"eager {d.get('eager_ms')}, compile {d.get('compile_ms')}, roofline {d.get('roofline_pct')} "
              f"{d.get('message') or ''}")
EOF
echo "== done in $(( $(date +%s) - start ))s"
