#!/usr/bin/env bash
# One real-model reply through `kgen eval` on its own, at the work folder's size, every progress line time-stamped
# and the GPU's memory sampled: where an evaluation's minutes go when the harness only saw "proposed 1" and then
# nothing (issue 32: the 8-CTA cluster softmax reply on KernelBench's 4096 x 393216 softmax held the evaluator
# 5 minutes without a verdict).
#   bash benchmarks/real_model/eval_reply.sh WORK/roundR/NAME.reply.md [TIMEOUT_S=90] [LIMIT_S=300]
# TIMEOUT_S is the judge's --timeout (the harness's runs use 90 s); LIMIT_S bounds the whole command.
# Out: $OUT/<NAME>.eval.json (kgen eval --json), <NAME>.eval.log (stderr, time-stamped), <NAME>.smi.csv.
set -uo pipefail
reply=${1:?usage: eval_reply.sh WORK/roundR/NAME.reply.md [TIMEOUT_S] [LIMIT_S]}
timeout_s=${2:-90}; limit=${3:-300}
. benchmarks/device_call.sh
name=$(basename "$reply" .reply.md)
work=$(dirname "$(dirname "$reply")")
problem=$work/problems/$name.py
cand=/tmp/$name.candidate.py
python3 -c "import sys; from kgen.proposers.extract import extract_candidate as e; x = e(open(sys.argv[1]).read());
src = x.source
sys.exit('no candidate in the reply') if not src else open(sys.argv[2], 'w').write(src)" "$reply" "$cand" || exit 1
export KGEN_DB=/tmp/eval-reply.db KGEN_CACHE_DIR=/tmp/kgen-cache-eval-reply
rm -rf "$KGEN_DB" "$KGEN_CACHE_DIR"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 2 > "$OUT/$name.smi.csv" 2>&1 &
smi=$!
start=$(date +%s)
echo "== $(date +%T) kgen eval $problem $cand --timeout $timeout_s --no-baselines (limit ${limit}s)"
{ timeout -k 10 "$limit" python3 -m kgen eval "$problem" "$cand" --timeout "$timeout_s" --no-baselines --json \
    2>&1 > "$OUT/$name.eval.json"; echo "rc $?" > /tmp/eval-reply.rc; } \
  | while IFS= read -r line; do echo "[$(( $(date +%s) - start ))s] $line"; done | tee "$OUT/$name.eval.log"
echo "== $(cat /tmp/eval-reply.rc) after $(( $(date +%s) - start )) s"
kill "$smi" 2>/dev/null
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d.get('outcome'), (d.get('message') or '')[:300]);
det=d.get('details') or {}; print('phases', det.get('phases')); print('steps', det.get('steps'))" \
  "$OUT/$name.eval.json" 2>/dev/null || echo "(no JSON: the command was stopped)"
