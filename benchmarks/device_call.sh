#!/usr/bin/env bash
# The prologue of every device call: unpack the bundle of packages the GPU image lacks (ray, openai,
# sqlalchemy, alembic) and bubblewrap (the image has no bwrap: .devbundle/bin/bwrap, with the shared
# libraries it needs in .devbundle/lib, copied in only where the image lacks them), set the
# environment, print versions. Source it:  . benchmarks/device_call.sh
# Then `save_db` copies the results DB ($KGEN_DB, default /tmp/h100.db, seeded from .devbundle/h100.db
# when carried) into $OUT as one consistent file (SQLite's backup API, WAL folded in).
if [ -z "${KGEN_NO_BUNDLE:-}" ]; then  # KGEN_NO_BUNDLE=1: the packages are installed (a dry run off the device)
  mkdir -p /tmp/site && tar -C /tmp/site -xJf .devbundle/site.tar.xz
  export PYTHONPATH=/tmp/site:$PWD
fi
if ! command -v bwrap >/dev/null && [ -x .devbundle/bin/bwrap ]; then
  cp .devbundle/bin/bwrap /usr/local/bin/bwrap
  for lib in .devbundle/lib/*; do
    [ -e "/usr/lib/x86_64-linux-gnu/$(basename "$lib")" ] || [ -e "/lib/x86_64-linux-gnu/$(basename "$lib")" ] \
      || cp "$lib" /usr/lib/x86_64-linux-gnu/
  done
  ldconfig 2>/dev/null || true
fi
bwrap --version 2>&1 | head -1
export PYTHONUNBUFFERED=1 MAX_JOBS=16
export KGEN_DB=${KGEN_DB:-/tmp/h100.db}
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
[ -f .devbundle/h100.db ] && [ ! -f "$KGEN_DB" ] && cp .devbundle/h100.db "$KGEN_DB"
echo "TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-unset}"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU', torch.cuda.device_count(), 'GPU(s)')"
save_db() { python3 -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close()" "$KGEN_DB" "$OUT/h100.db"; }
quiet_ray() { grep --line-buffered -v -E "rpc_client|gcs_client|core_worker|raylet"; }
