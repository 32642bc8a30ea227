#!/usr/bin/env bash
# The best kernel of each problem through the whole `kgen eval` (sandboxed judge, 5 trials, then the eager and
# torch.compile baselines timed into a fresh DB beside it), on this machine's first call where possible: the
# figures RESULTS.md's kernel table claims, with both speedups.
#   bash benchmarks/winners_gpu.sh DEADLINE_S PROBLEM:FILE...   (FILE under problems/starters/PROBLEM/, or a path)
#   -> $OUT/winners.tar.gz (each JSON and stderr, the DB), $OUT/winners.txt (one line per kernel)
set -uo pipefail
deadline=$(( $(date +%s) + ${1:?deadline seconds} )); shift
. benchmarks/device_call.sh
W=/tmp/winners; rm -rf "$W"; mkdir -p "$W"
export KGEN_DB=$W/winners.db KGEN_CACHE_DIR=$W/cache TRITON_CACHE_DIR=$W/triton-cache TORCHINDUCTOR_CACHE_DIR=$W/inductor-cache
for pf in "$@"; do
  problem=${pf%%:*}; file=${pf#*:}
  [ -f "$file" ] || file=problems/starters/$problem/$file
  name=$problem-$(basename "$file" .py)
  t=$(( deadline - $(date +%s) - 5 )); [ "$t" -gt 200 ] && t=200
  if [ "$t" -lt 30 ]; then echo "== skipped $name (${t}s left)"; continue; fi
  echo "== $(date +%T) kgen eval $problem $file (timeout ${t}s)"
  s=$(date +%s.%N)
  timeout "$t" python3 -m kgen eval "$problem" "$file" --json --db "$KGEN_DB" > "$W/$name.json" 2> "$W/$name.err" \
    || echo "   (exit $?)"
  python3 - "$W/$name.json" "$name" "$s" <<'PY' | tee -a "$W/winners.txt"
import json, sys, time
try:
    d = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print(f"{sys.argv[2]}: no result"); sys.exit()
kp = (d.get("details") or {}).get("kernel_profile") or {}
f = lambda v, p="": "-" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v)) + p  # noqa: E731
print(f"{sys.argv[2]}: {d.get('outcome')} {f(d.get('runtime_ms'))} ms (CUPTI {f((kp.get('gpu_us') or 0) / 1e3 or None)}), "
      f"eager {f(d.get('eager_ms'))} ms {f(d.get('speedup_eager'), 'x')}, torch.compile {f(d.get('compile_ms'))} ms "
      f"{f(d.get('speedup_compile'), 'x')}, roofline {f(d.get('roofline_pct'), '%')}, normwise {d.get('norm_rel_err')}, "
      f"wall {time.time() - float(sys.argv[3]):.1f} s, {d.get('device')} {(d.get('message') or '')[:200]}")
PY
done
tar czf "$OUT/winners.tar.gz" --exclude="*cache*" -C /tmp winners
cp "$W/winners.txt" "$OUT/winners.txt"
