#!/usr/bin/env bash
# Build the device bundle every GPU call carries (.devbundle, ignored by git): the Python packages the GPU image
# lacks (../shared/tools/device-bundle: ray, openai, sqlalchemy, alembic, nvidia-ml-py) and bubblewrap with the
# shared libraries it needs beyond glibc (benchmarks/device_call.sh installs them where the image lacks them).
# Usage, from the repository root, once per fresh checkout:  bash benchmarks/make_devbundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v bwrap >/dev/null || { echo "make_devbundle.sh: install bubblewrap here first (apt-get install bubblewrap)" >&2; exit 1; }
bash ../shared/tools/device-bundle .devbundle ray openai sqlalchemy alembic nvidia-ml-py
mkdir -p .devbundle/bin .devbundle/lib
cp "$(command -v bwrap)" .devbundle/bin/bwrap
for lib in $(ldd "$(command -v bwrap)" | awk '/=>/ {print $3}'); do
  case $(basename "$lib") in libc.so*|ld-linux*) ;; *) cp -L "$lib" .devbundle/lib/ ;; esac
done
du -sh .devbundle
