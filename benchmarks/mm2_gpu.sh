#!/usr/bin/env bash
# One device call (<= 7 min; run it with the 600 s limit): the 3xFP16 matmul starters against the current best,
# triton_3xtf32_asplit.py (1.390 ms judged), on the H100.
#   1. benchmarks/sweep.py grids (trusted code, do_bench medians with L2 flushed, normwise error on x1 and x100
#      inputs) of triton_3xfp16_asplit.py and triton_3xfp16_presplit.py beside triton_3xtf32_asplit.py as
#      written, same machine, same timing                                       -> mm2-*.json, mm2-sweeps.txt
#   2. the fastest correct setting of each new starter written out as a file    -> mm2-best-<stem>.py
#   3. each kernel's share of one forward of those bests and of asplit (torch.profiler, warm L2) -> mm2-kernels.txt
#   4. `kgen eval --json` of each best (the judge: sandboxed, 5 trials, cold timing, eager/torch.compile
#      baselines timed once into a fresh DB)                                    -> mm2-eval-<stem>.json/.err
#   5. a summary table (ms, % of the 0.989 ms TF32/3 floor, error)              -> mm2-summary.txt (also printed)
# Everything lands in /tmp/mm2-work/mm2/ and comes back as ONE file, $OUT/mm2-results.tar.gz (the device returns
# at most 8 files), with a copy of the summary, $OUT/mm2-summary.txt. Each step has its own timeout under a
# total deadline; a failing step is reported and the rest runs.
#   bash benchmarks/mm2_gpu.sh [DEADLINE_S]   (default 410)
# Off the device (no GPU: sweep.py runs the small size in Triton's interpreter) a dry run of the Python parts:
#   KGEN_NO_BUNDLE=1 OUT=/tmp/mm2-dry PATH=$PWD/.venv/bin:$PATH bash benchmarks/mm2_gpu.sh 400
set -uo pipefail
start=$(date +%s)
deadline=${1:-410}
. benchmarks/device_call.sh
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen-cache}
# the working folder is outside $OUT: only the tarball and the summary go to $OUT (the device returns <= 8 files)
W=${MM2_WORK:-/tmp/mm2-work}
R=$W/mm2
rm -rf "$R" && mkdir -p "$R"
left() { echo $(( deadline - ($(date +%s) - start) )); }
FLOOR=0.989
RESERVE=${MM2_RESERVE:-170}

sweep() {  # sweep NAME BUDGET_S FILE [--grid ...]: the budget bounds new combinations; +60 s for setup and the last one
  local name=$1 budget=$2 file=$3; shift 3
  local t; t=$(( $(left) - RESERVE ))  # RESERVE: kept for the kernel profile and the two judged runs
  if [ "$t" -lt 30 ]; then echo "== skip sweep $name: $(left)s left"; return; fi
  echo "== sweep $name ($file $*; budget ${budget}s, $(left)s left)"
  timeout "$(( budget + 60 < t ? budget + 60 : t ))" python3 benchmarks/sweep.py matmul "$file" "$@" \
    --budget-s "$budget" --json "$R/mm2-$name.json" 2>&1 | grep -v -E "^\s+(File|raise|\^)|^Traceback" \
    || echo "   (sweep $name failed or timed out)"
}

best() {  # best STEM JSON...: the fastest correct row of those sweeps -> $R/mm2-best-STEM.py
  python3 - "$R" "$@" <<'EOF'
import json, os, sys
sys.path.insert(0, os.getcwd())
from kgen.proposers.offline import apply_changes, find_tunables
out, stem, jsons = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
for j in jsons:
    if os.path.exists(j):
        rows += [r for r in json.load(open(j))["rows"] if r.get("ok")]
if not rows:
    print(f"BEST {stem}: no correct setting in the sweeps")
    sys.exit(1)
b = min(rows, key=lambda r: r["ms"])
path = f"problems/starters/matmul/{stem}.py"
src = open(path).read()
tun = {t.name: t for t in find_tunables(src)}
open(os.path.join(out, f"mm2-best-{stem}.py"), "w").write(apply_changes(src, [(tun[k], v) for k, v in b["setting"].items()]))
print(f"BEST {stem}: {b['setting'] or '(as written)'} sweep {b['ms']:.4f} ms err {b['err']:.1e}")
EOF
}

judge() {  # judge STEM: kgen eval of $R/mm2-best-STEM.py
  local stem=$1 f="$R/mm2-best-$1.py" t; t=$(left)
  [ -f "$f" ] || { echo "== judge $stem: skipped (no best setting)"; return; }
  if [ "$t" -lt 45 ]; then echo "== skip judge $stem: ${t}s left"; return; fi
  echo "== judge $stem (${t}s left)"
  timeout "$(( t - 5 ))" python3 -m kgen eval matmul "$f" --json --timeout "$(( t - 15 ))" \
    > "$R/mm2-eval-$stem.json" 2> "$R/mm2-eval-$stem.err" || echo "   (kgen eval $stem: exit $?)"
  tail -2 "$R/mm2-eval-$stem.err"
}

D=problems/starters/matmul
{
# the current best as written (the reference for every other time in this call)
sweep asplit-tf32 15 triton_3xtf32_asplit.py
# 3xFP16: K step x pipeline depth (A split in registers) and x cp.async/TMA loads (both operands presplit)
sweep fp16a-k 50 triton_3xfp16_asplit.py --grid BLOCK_K=64,32 --grid NUM_STAGES=3,4
sweep fp16p-k 50 triton_3xfp16_presplit.py --grid BLOCK_K=64,32 --grid USE_TMA=0,1
# 4-warp 64x128 tiles: 2 CTAs per SM (asplit 225, presplit 246 registers; presplit with TMA 168: 3 CTAs), so one
# CTA's barrier/drain overlaps another's MMAs, at 1.5x the L2 bytes per FLOP of 128x128
sweep fp16a-w4 30 triton_3xfp16_asplit.py --grid NUM_WARPS=4 --grid BLOCK_M=64 --grid BLOCK_K=32 --grid NUM_STAGES=3,4 \
  --grid PERSISTENT=2,0
sweep fp16p-w4 30 triton_3xfp16_presplit.py --grid NUM_WARPS=4 --grid BLOCK_M=64 --grid BLOCK_K=32 --grid USE_TMA=1,0 \
  --grid PERSISTENT=0,2
sweep fp16p-w4t3 5 triton_3xfp16_presplit.py --grid NUM_WARPS=4 --grid BLOCK_M=64 --grid BLOCK_K=32 --grid USE_TMA=1 \
  --grid PERSISTENT=3
# tile order, pipeline depth at BLOCK_K 32
sweep fp16a-order 15 triton_3xfp16_asplit.py --grid GROUP_M=16 --grid PERSISTENT=1,0
sweep fp16p-s4 15 triton_3xfp16_presplit.py --grid BLOCK_K=32 --grid NUM_STAGES=4 --grid GROUP_M=8,16
} 2>&1 | tee "$R/mm2-sweeps.txt"

{
best triton_3xfp16_asplit "$R"/mm2-fp16a-*.json
best triton_3xfp16_presplit "$R"/mm2-fp16p-*.json
} 2>&1 | tee -a "$R/mm2-sweeps.txt"

# per-kernel time of one forward (warm L2, so a lower bound of each launch's flushed time): prep vs GEMM
t=$(left)
if [ "$t" -gt 60 ]; then
  echo "== kernels (${t}s left)"
  timeout 40 python3 - "$R" <<'EOF' 2>&1 | tee "$R/mm2-kernels.txt"
import importlib.util, os, sys
import torch
out = sys.argv[1]
files = [("triton_3xtf32_asplit", "problems/starters/matmul/triton_3xtf32_asplit.py")]
files += [(s, os.path.join(out, f"mm2-best-{s}.py")) for s in ("triton_3xfp16_asplit", "triton_3xfp16_presplit")]
if not torch.cuda.is_available():
    print("no GPU: skipped")
    sys.exit(0)
torch.manual_seed(0)
A = torch.randn(4096, 4096, device="cuda")
B = torch.randn(4096, 4096, device="cuda")
for stem, path in files:
    if not os.path.exists(path):
        print(f"{stem}: no file")
        continue
    spec = importlib.util.spec_from_file_location(stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.ModelNew()
    for _ in range(3):
        model(A, B)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            model(A, B)
        torch.cuda.synchronize()
    times = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        us = getattr(e, "self_cuda_time_total", 0) if us is None else us
        if us > 0:
            times.append((us / 10, e.count // 10, e.key))
    times.sort(reverse=True)
    parts = ", ".join(f"{k[:40]} {us:.1f} us x{n}" for us, n, k in times)
    print(f"{stem}: {sum(t[0] for t in times):.1f} us of kernels per forward: {parts}")
EOF
else
  echo "== skip kernels: ${t}s left"
fi

judge triton_3xfp16_asplit
judge triton_3xfp16_presplit

echo "== summary (floor $FLOOR ms = TF32/3; target <= 1.15 ms; asplit judged 1.390 ms)" | tee "$R/mm2-summary.txt"
python3 - "$R" "$FLOOR" <<'EOF' | tee -a "$R/mm2-summary.txt"
import glob, json, os, sys
out, floor = sys.argv[1], float(sys.argv[2])
print(f"{'what':44s} {'ms':>8s} {'% floor':>8s} {'err':>8s}  notes")
for path in sorted(glob.glob(os.path.join(out, "mm2-*.json"))):
    name = os.path.basename(path)[4:-5]
    try:
        d = json.load(open(path))
    except (OSError, ValueError) as exc:
        print(f"{name:44s} unreadable ({exc})")
        continue
    if "rows" in d:  # a sweep
        good = sorted((r for r in d["rows"] if r.get("ok")), key=lambda r: r["ms"])
        bad = [r for r in d["rows"] if not r.get("ok")]
        if good:
            b = good[0]
            setting = " ".join(f"{k}={v}" for k, v in b["setting"].items()) or "(as written)"
            print(f"{'sweep ' + name:44s} {b['ms']:8.4f} {100 * floor / b['ms']:7.0f}% {b['err']:8.1e}  best {setting}; "
                  f"{len(good)} ok, {len(bad)} failed/wrong; eager {d['eager_ms']:.4f}")
        else:
            print(f"{'sweep ' + name:44s} {'-':>8s} {'-':>8s} {'-':>8s}  no correct row: "
                  + "; ".join(str(r.get("error") or f"err {r.get('err')}") for r in bad[:3]))
    else:  # kgen eval --json
        ms, err = d.get("runtime_ms"), d.get("norm_rel_err")
        shown_ms = f"{ms:8.4f}" if ms else "-"
        shown_pct = f"{100 * floor / ms:7.0f}%" if ms else "-"
        shown_err = f"{err:8.1e}" if err is not None else "-"
        print(f"{'judge ' + name:44s} {shown_ms:>8s} {shown_pct:>8s} {shown_err:>8s}  {d.get('outcome')}; "
              f"eager {d.get('eager_ms')}, compile {d.get('compile_ms')}, roofline {d.get('roofline_pct')} "
              f"{(d.get('message') or '')[:160]}")
EOF
cp "$R/mm2-summary.txt" "$OUT/mm2-summary.txt"
tar -C "$W" -czf "$OUT/mm2-results.tar.gz" mm2 && echo "== $OUT/mm2-results.tar.gz: $(ls "$R" | wc -l) files"
echo "== done in $(( $(date +%s) - start ))s"
