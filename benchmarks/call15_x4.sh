#!/usr/bin/env bash
# The fourteenth session's last call: issue 30's 240-entry collection resumed to its end on every GPU of a 4-GPU
# machine (resume4.db: 139 of 240 stored; the thirteenth session's second call's DB did not come back), with the
# CPU compile stage niced (kgen.judge.spares.compile_nice). The DB is saved as soon as kgen eval ends; the rest is
# packed into one file (a call returns few files).
#   bash benchmarks/call15_x4.sh COLLECTION_LIMIT_S   (carry .devbundle and benchmarks/collection_kb240)
set -uo pipefail
limit=${1:-400}
KGEN_COMMIT=${KGEN_COMMIT:-?} KGEN_COLLECTION=benchmarks/collection_kb240 \
  KGEN_COLLECTION_RESUME=benchmarks/collection_kb240/resume4.db bash benchmarks/collection_gpu.sh "$limit"
cd "$OUT" && tar czf /tmp/call15.tgz --exclude=h100.db . && mv /tmp/call15.tgz . \
  && find . -mindepth 1 -maxdepth 1 ! -name call15.tgz ! -name h100.db ! -name figures.txt ! -name summary.txt \
       ! -name where.txt -exec rm -rf {} +
ls "$OUT"
