#!/usr/bin/env bash
# What every kernel round on the device does, sourced by the round's own script (which is then a list of
# sweeps and judged files):
#   . benchmarks/kernel_round.sh NAME TOTAL_S RESERVE_S
#   sweep SWEEP BUDGET_S PROBLEM FILE [sweep.py args: --grid/--combo ...]   benchmarks/sweep.py, its own timeout,
#                                         keeping RESERVE_S for the judged runs; -> $R/SWEEP.json and .log
#   best OUT_NAME SOURCE [KNOB=VALUE] JSON...   the fastest correct setting in those sweeps (only rows whose
#                                         KNOB has VALUE when given) written out as $R/OUT_NAME.py; prints it
#   judge PROBLEM NAME [SECONDS]          `kgen eval PROBLEM $R/NAME.py --json --no-baselines` (sandboxed, cold
#                                         cache); -> $R/judge-NAME.json and .err
#   prebuild STARTER [SECONDS]            a CUDA starter's load_inline build in a process of its own (run it in the
#                                         background beside the Triton sweeps): the sweeps' processes then find it
#                                         in torch's extension cache; -> $R/build-NAME.log and a line "build NAME: ..."
#   finish                                the summary (every sweep's rows with % of floor and x vs the first row
#                                         of each problem's first sweep, then each judged file), tarred with all
#                                         results into $OUT/NAME-results.tar.gz, summary in $OUT/NAME-summary.txt
# Floors (ms) come from benchmarks/RESULTS.md's measured ceilings (3.0 TB/s, 51.6 fp32 TFLOP/s); the
# convolutions' is the tensor-core bound the issue uses. Dry run off the device (small size, interpreter):
#   KGEN_NO_BUNDLE=1 OUT=/tmp/round-dry PATH=$PWD/.venv/bin:$PATH bash benchmarks/<round>.sh
set -uo pipefail
ROUND=${1:?round name}; TOTAL=${2:?total seconds}; RESERVE=${3:-110}
ROUND_START=$(date +%s)
. benchmarks/device_call.sh
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache}
export R=/tmp/$ROUND-results; rm -rf "$R"; mkdir -p "$R"
left() { echo $(( TOTAL - ($(date +%s) - ROUND_START) )); }

sweep() {
  local name=$1 budget=$2; shift 2
  local t=$(( $(left) - RESERVE ))
  if [ "$t" -lt 30 ]; then echo "== skip sweep $name: ${t}s left before the judge's reserve" | tee -a "$R/steps.log"; return; fi
  [ "$budget" -gt $(( t - 25 )) ] && budget=$(( t - 25 ))
  echo "== $(date +%T) sweep $name: $* (budget ${budget}s, $(left)s left)" | tee -a "$R/steps.log"
  timeout "$(( budget + 40 < t ? budget + 40 : t ))" python3 benchmarks/sweep.py "$@" --budget-s "$budget" \
    --json "$R/$name.json" > "$R/$name.log" 2>&1 || echo "   (sweep $name: exit $?)" | tee -a "$R/steps.log"
  grep -v -E "^\s+(File|raise|\^|~)|^Traceback|^\s*$" "$R/$name.log" | tail -22
}

best() {
  local out=$1 src=$2; shift 2
  local filter=""
  case "${1:-}" in *=*) filter=$1; shift ;; esac
  python3 - "$out" "$src" "$filter" "$@" <<'PY'
import json, os, sys
sys.path.insert(0, os.getcwd())
from kgen.proposers.offline import apply_changes, find_tunables
name, path, flt, jsons = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
src = open(path).read()
tun = {t.name: t for t in find_tunables(src)}
rows = []
for j in jsons:
    if os.path.exists(j):
        d = json.load(open(j))
        if os.path.basename(d.get("starter", "")) == os.path.basename(path):
            rows += [r for r in d["rows"] if r.get("ok")]
if flt:
    k, v = flt.split("=")
    rows = [r for r in rows if str(r["setting"].get(k, tun[k].value)) == v]
if not rows:
    sys.exit(0)
b = min(rows, key=lambda r: r["ms"])
setting = {k: v for k, v in b["setting"].items() if k in tun and v != tun[k].value}
open(os.path.join(os.environ["R"], name + ".py"), "w").write(apply_changes(src, [(tun[k], v) for k, v in setting.items()]))
print(",".join(f"{k}={v}" for k, v in setting.items()) or "(as written)")
PY
}

judge() {
  local problem=$1 name=$2 cap=${3:-120} f="$R/$2.py" t; t=$(( $(left) - 15 ))
  [ -f "$f" ] || { echo "== judge $name: skipped (no such file)" | tee -a "$R/steps.log"; return; }
  if [ "$t" -lt 40 ]; then echo "== judge $name: skipped (${t}s left)" | tee -a "$R/steps.log"; return; fi
  [ "$t" -gt "$cap" ] && t=$cap
  echo "== $(date +%T) judge $problem $name (timeout ${t}s)" | tee -a "$R/steps.log"
  echo "$problem" > "$R/judge-$name.problem"
  timeout "$t" python3 -m kgen eval "$problem" "$f" --json --no-baselines --timeout $(( t - 10 )) \
    > "$R/judge-$name.json" 2> "$R/judge-$name.err" || echo "   (judge $name: exit $?)"
  tail -2 "$R/judge-$name.err"
}

prebuild() {
  local name; name=$(basename "$1" .py)
  timeout "${2:-170}" python3 - "$1" > "$R/build-$name.log" 2>&1 <<'PY'
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("kgen_prebuild", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
t = time.time()
if mod.torch.cuda.is_available():  # off the device (a dry run) there is nothing to build for
    mod._build()
print(f"built in {time.time() - t:.1f}s")
PY
  echo "build $name: exit $? $(tail -1 "$R/build-$name.log")"
}

finish() {
  python3 - "$R" <<'PY' | tee "$R/summary.txt"
import glob, json, os, sys
r = sys.argv[1]
FLOORS = {"softmax": 0.715, "layernorm": 0.190, "matmul": 1.0, "conv2d": 0.155, "conv_relu_maxpool": 0.155}
first = {}
sweeps = []
for path in sorted(glob.glob(f"{r}/*.json"), key=os.path.getmtime):
    if os.path.basename(path).startswith("judge-"):
        continue
    try:
        d = json.load(open(path))
    except (OSError, ValueError) as exc:
        print(f"{os.path.basename(path)}: unreadable ({exc})")
        continue
    sweeps.append((path, d))
    rows = [x for x in d["rows"] if x.get("ms")]
    if rows and d["problem"] not in first:
        first[d["problem"]] = (rows[0]["ms"], d["starter"])
for path, d in sweeps:
    floor = FLOORS.get(d["problem"])
    base = first.get(d["problem"], (None, None))[0]
    print(f"-- {os.path.basename(path)[:-5]}: {d['problem']}/{os.path.basename(d['starter'])} on {d['device']}, "
          f"triton {d['triton']}, eager {d['eager_ms']:.4f} ms"
          + (f"; x vs {os.path.basename(first[d['problem']][1])} {base:.4f} ms" if base else ""))
    for x in sorted(d["rows"], key=lambda x: x.get("ms") or 1e9):
        st = " ".join(f"{k}={v}" for k, v in x["setting"].items()) or "(as written)"
        if "ms" in x:
            pct = f" {100 * floor / x['ms']:3.0f}% floor" if floor else ""
            vs = f" {base / x['ms']:5.2f}x" if base else ""
            print(f"   {st:60s} {x['ms']:7.4f} ms{pct}{vs}  err {x['err']:.1e} {'ok' if x['ok'] else 'WRONG'}")
        else:
            print(f"   {st:60s} failed: {x.get('error', '')[:120]}")
for path in sorted(glob.glob(f"{r}/judge-*.json"), key=os.path.getmtime):
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        print(f"== {os.path.basename(path)[6:-5]} (judge): no result")
        continue
    ms, kp = d.get("runtime_ms"), (d.get("details") or {}).get("kernel_profile") or {}
    problem_file = path[:-5] + ".problem"
    floor = FLOORS.get(open(problem_file).read().strip()) if os.path.exists(problem_file) else None
    cupti = kp.get("gpu_us")
    print(f"== {os.path.basename(path)[6:-5]} (judge): {d.get('outcome')} "
          + (f"{ms:.4f} ms" + (f" ({100 * floor / ms:.0f}% of floor)" if floor else "") if ms else "untimed")
          + (f", CUPTI {cupti / 1e3:.4f} ms" if cupti else "")
          + f", normwise {d.get('norm_rel_err')} {(d.get('message') or '')[:300]}")
PY
  cp "$R/summary.txt" "$OUT/$ROUND-summary.txt"
  tar czf "$OUT/$ROUND-results.tar.gz" -C /tmp "$ROUND-results"
  echo "== $ROUND done in $(( $(date +%s) - ROUND_START ))s"
}
