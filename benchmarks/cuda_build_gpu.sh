#!/usr/bin/env bash
# Issue 30, ninth session: what the 240-entry collection's CUDA builds cost on the H100 box's CPUs, as written and
# with torch/extension.h trimmed to torch/types.h (kgen.harness.cuda_build.trim_torch_include), and whether the
# trimmed build's device code is byte for byte the same; then one entry through `kgen eval` on the GPU, which must
# be correct with its build logged as trimmed. Writes to $OUT:
#   costs.jsonl   one line per load_inline call (benchmarks/cuda_build_costs.py): cxx, cxx+pch, nvcc, nvcc-trimmed
#                 seconds, same_device_code
#   summary.txt   medians and sums of those, how many builds had the same device code; the eval's outcome
#   eval.json     the `kgen eval` result of 22_Tanh (llama-3.1-405b's leaderboard kernel)
# and the GPU test of tests/test_cuda_trim_include.py (torch's ninja build of a trimmed source, loaded and run).
# Usage (device call, carry benchmarks/collection_kb240 and .devbundle):
#   bash benchmarks/cuda_build_gpu.sh [ENTRIES=30] [AT_ONCE=15] [LIMIT_S=420]
# ENTRIES of the collection (its first ones, in file order) are built AT_ONCE at a time (the collection run's 15
# compile tasks on 16 cores); each builds 4 ways one after another, so the per-build seconds are under that load.
set -uo pipefail
export KGEN_TRIM_CUDA_INCLUDE=1  # on by default since this call verified it (kept explicit: the measure is of trimming)
entries=${1:-30}
at_once=${2:-15}
limit=${3:-420}
export KGEN_CACHE_DIR=/tmp/kgen-cache-buildcost
. benchmarks/device_call.sh
export MAX_JOBS=2  # device_call.sh's 16 is for whole builds; these are single compiles
coll=benchmarks/collection_kb240
if [ ! -f "$coll/collection.jsonl" ]; then
  echo "SKIP: $coll/collection.jsonl is missing: carry benchmarks/collection_kb240" | tee "$OUT/summary.txt"
  exit 0
fi
rm -rf "$KGEN_CACHE_DIR"
nvcc --version | tail -1 | tee "$OUT/summary.txt"
python3 -c "import json,sys; [print(sys.argv[1] + '/' + json.loads(l)['candidate']) for l in list(open(sys.argv[1] + '/collection.jsonl'))[:int(sys.argv[2])]]" \
  "$coll" "$entries" > /tmp/entries.txt
python3 -c "from kgen.harness.cuda_build import ensure_torch_pch; print('PCH', ensure_torch_pch((), True))"  # once, before the crowd
started=$(date +%s)
timeout "$limit" xargs -a /tmp/entries.txt -P "$at_once" -I{} sh -c \
  'python3 benchmarks/cuda_build_costs.py "$1" 2>/dev/null | python3 -c "import json,sys; [print(json.dumps(r)) for r in json.load(sys.stdin)]"' \
  _ {} > "$OUT/costs.jsonl"
echo "builds: $(($(date +%s) - started)) s wall for $(grep -c . "$OUT/costs.jsonl") calls, $at_once at once (limit $limit s)" \
  | tee -a "$OUT/summary.txt"
python3 - "$OUT/costs.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
for key in ("cxx", "cxx+pch", "nvcc", "nvcc-trimmed"):
    seconds = [r[key]["s"] for r in rows if r.get(key, {}).get("ok")]
    failed = sum(1 for r in rows if key in r and not r[key]["ok"])
    if seconds:
        print(f"{key:13s} n={len(seconds):3d} median {statistics.median(seconds):6.1f} s  max {max(seconds):6.1f} s  "
              f"sum {sum(seconds):7.0f} s  failed {failed}")
trimmed = [r for r in rows if "nvcc-trimmed" in r]
print(f"trimmed: {len(trimmed)} of {len(rows)} calls; compiled {sum(r['nvcc-trimmed']['ok'] for r in trimmed)}; "
      f"same device code {sum(bool(r.get('same_device_code')) for r in trimmed)}")
PY
timeout 240 python3 -m kgen eval "$coll/KernelBench/level1/22_Tanh.py" "$coll/solutions/c5a8392f0adc3e827cb33ef340ab65ad.py" \
  --json --no-baselines --db /tmp/buildcost.db > "$OUT/eval.json" 2> "$OUT/eval.err"
python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
builds = r.get('details', {}).get('cuda_builds', [])
print('eval 22_Tanh:', r.get('outcome'), '| builds:', [(b.get('s'), b.get('trimmed_include', False)) for b in builds])
" "$OUT/eval.json" 2>&1 | tee -a "$OUT/summary.txt"
# the ninja path of a CUDA torch (not testable on a CPU machine): a trimmed build loads and computes tanh
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_trim_include.py -k on_a_gpu 2>&1 | tail -3 \
  | tee -a "$OUT/summary.txt"
