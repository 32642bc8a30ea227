#!/usr/bin/env bash
# One device call: the best kernel of each problem through the judge (`kgen eval --json`, sandboxed, cold,
# fresh DB: the first candidate of a problem times its eager and torch.compile baselines), with the CUPTI
# kernel time the judge recorded next to the judge's median.  -> $OUT/judge-*.json, $OUT/judge-summary.txt
#   bash benchmarks/judge_kernels_gpu.sh DEADLINE_S PROBLEM:STARTER...
set -uo pipefail
deadline=$(( $(date +%s) + ${1:?deadline seconds} )); shift
. benchmarks/device_call.sh
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache}
for ps in "$@"; do
  problem=${ps%%:*}; starter=${ps#*:}; file=problems/starters/$problem/$starter.py
  t=$(( deadline - $(date +%s) )); [ "$t" -lt 40 ] && { echo "== skipped $ps (${t}s left)"; continue; }
  echo "== $(date +%T) kgen eval $problem $starter (${t}s left)"
  timeout "$t" python3 -m kgen eval "$problem" "$file" --json --timeout "$t" > "$OUT/judge-$problem-$starter.json" \
    2> "$OUT/judge-$problem-$starter.err" || tail -3 "$OUT/judge-$problem-$starter.err"
done
python3 - "$OUT" <<'PY' | tee "$OUT/judge-summary.txt"
import glob, json, os, sys
print(f"{'problem/starter':55s} {'outcome':10s} {'judge ms':>9s} {'CUPTI ms':>9s} {'eager':>7s} {'compile':>7s} {'x eager':>7s} {'x comp':>7s} {'roof%':>6s} {'err':>8s}")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "judge-*.json"))):
    try:
        d = json.load(open(path))
    except ValueError:
        print(os.path.basename(path), "unreadable"); continue
    kp = (d.get("details") or {}).get("kernel_profile") or {}
    cupti = kp.get("gpu_us")
    f = lambda v, fmt: (fmt % v) if isinstance(v, (int, float)) else "-"
    print(f"{os.path.basename(path)[6:-5]:55s} {d.get('outcome',''):10s} {f(d.get('runtime_ms'), '%9.4f')} "
          f"{f(cupti / 1e3 if cupti else None, '%9.4f')} {f(d.get('eager_ms'), '%7.3f')} {f(d.get('compile_ms'), '%7.3f')} "
          f"{f(d.get('speedup_eager'), '%7.2f')} {f(d.get('speedup_compile'), '%7.2f')} {f(d.get('roofline_pct'), '%6.1f')} "
          f"{f(d.get('norm_rel_err'), '%8.1e')} {d.get('message') or ''}"[:400])
    t = (d.get("details") or {}).get("timing") or {}
    print(f"    timing: median {t.get('median_ms')} p10 {t.get('p10_ms')} p90 {t.get('p90_ms')} runs {t.get('runs')} "
          f"beside {t.get('beside_events_ms')} overhead {t.get('overhead_ms')} unexplained {t.get('unexplained_ms')}")
PY
