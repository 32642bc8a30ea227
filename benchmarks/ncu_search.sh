#!/usr/bin/env bash
# One device call for issue 17's Nsight Compute profiles: the GPU tests that take them, a 3-round softmax
# search with them on (fresh DB), its per-round cost and the next round's prompt.
#   bash benchmarks/ncu_search.sh DEADLINE_S [pytest -k expression]
set -uo pipefail
deadline=$(( $(date +%s) + ${1:?deadline seconds} ))
. benchmarks/device_call.sh
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache}
left() { echo $(( deadline - $(date +%s) )); }
if [ -n "${2:-}" ]; then
  timeout $(( $(left) / 2 )) python3 -m pytest -q -p no:cacheprovider -m "gpu and not slow" tests/test_eval_gpu.py \
    -k "$2" 2>&1 | tee "$OUT/gpu-tests.txt" | tail -15
fi
started=$SECONDS
timeout -s INT $(( $(left) - 40 )) python3 -m kgen search --problem softmax --rounds 3 --candidates 6 --language triton \
  --proposer offline --ncu-budget 60 --db "$KGEN_DB" --timeout 150 2>&1 | quiet_ray | tee "$OUT/search.log" | tail -25
echo "search wall: $((SECONDS - started)) s"
PYTHONPATH=/tmp/site:$PWD python3 benchmarks/profile_cost.py "$KGEN_DB" --prompt "$OUT/propose_prompt.txt" \
  | tee "$OUT/profile_cost.json"
python3 -m kgen show "$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select candidate_id from evaluations where details like '%\\\"ncu\\\"%' order by runtime_ms limit 1\").fetchone()[0])" "$KGEN_DB")" --db "$KGEN_DB" 2>&1 | grep -i -E "nsight|profile|eval" | head -12
save_db
