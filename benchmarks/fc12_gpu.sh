#!/usr/bin/env bash
# One device call (twelfth session, issue 26): the fixed costs after the fused compare (kgen.judge.fused_compare),
# the judge's per-trial work with it and without (KGEN_FUSED_COMPARE=0), its GPU test, and how long Ray's local
# start takes with and without the search's setup thread beside it (benchmarks/ray_start.py).
#   bash benchmarks/fc12_gpu.sh DEADLINE_S      (carry .devbundle)
# $OUT: fc12.tgz (everything) + the logs that matter unpacked beside it.
set -uo pipefail
deadline=${1:-450}
started=$(date +%s)
bash benchmarks/fixed_costs_gpu.sh "$(( deadline - 150 ))" static eval search
. benchmarks/device_call.sh >/dev/null
{
  echo "== judge work per trial, torch path (KGEN_FUSED_COMPARE=0)"
  KGEN_FUSED_COMPARE=0 python3 benchmarks/judge_work.py --json "$OUT/judgework-torch.json"
  echo "== judge work per trial, fused"
  python3 benchmarks/judge_work.py --json "$OUT/judgework-fused.json"
  echo "== GPU test of the fused compare"
  if python3 -c "import pytest" 2>/dev/null; then
    python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_fused_compare.py 2>&1 | tail -3
  else
    echo "no pytest on this image: the test's cases script, run directly"
    python3 - <<'PY'
import pathlib, subprocess, sys, json, tempfile
sys.path.insert(0, "tests")
import test_fused_compare as t
d = pathlib.Path(tempfile.mkdtemp())
t._check(t._run(d, "cuda", {}))
print("fused compare on the GPU: every case matches the torch path")
PY
  fi
} 2>&1 | tee "$OUT/judgework.txt"
left=$(( deadline - ($(date +%s) - started) - 10 ))
[ "$left" -gt 40 ] && timeout "$left" python3 benchmarks/ray_start.py --reps 2 --json "$OUT/ray_start.json" 2>&1 \
  | tee "$OUT/ray_start.txt"
cd "$OUT" && tar czf /tmp/fc12.tgz . 2>/dev/null && mv /tmp/fc12.tgz . \
  && find . -maxdepth 1 -type f ! -name fc12.tgz ! -name fixed_costs.log ! -name judgework.txt ! -name ray_start.txt \
       ! -name search-summary.txt -delete && find . -mindepth 1 -type d -exec rm -rf {} +
ls "$OUT"
