#!/usr/bin/env bash
# One device call: unpack the bundle of packages the GPU image lacks (ray, openai, sqlalchemy), run the
# GPU-marked tests, then `kgen bench` on the given problems. Results land under $OUT (or ./gpu-out).
#   bash benchmarks/gpu_run.sh "softmax layernorm" ROUNDS CANDIDATES [TEST_TIMEOUT_S]
set -uo pipefail
problems=${1:-"softmax layernorm"}; rounds=${2:-3}; cands=${3:-6}; test_timeout=${4:-0}
out=${OUT:-gpu-out}; mkdir -p "$out"
mkdir -p /tmp/site && tar -C /tmp/site -xJf .devbundle/site.tar.xz && export PYTHONPATH=/tmp/site:$PWD
export PYTHONUNBUFFERED=1 MAX_JOBS=16
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))"
if [ "$test_timeout" -gt 0 ]; then
  timeout "$test_timeout" python3 -m pytest -q -p no:cacheprovider -m gpu tests 2>&1 | tee "$out/gpu-tests.txt" | tail -15
fi
args=(); for p in $problems; do args+=(--problems "$p"); done
python3 -m kgen bench "${args[@]}" --rounds "$rounds" --candidates "$cands" --out "$out/bench" --timeout 150 2>&1 \
  | grep -v -E "rpc_client|gcs_client" | tail -40
