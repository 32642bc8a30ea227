"""How long kgen's compile stage takes to build CUDA candidates: cold (nothing of the candidate
built yet) and warm (the same source again), without and with kgen's precompiled torch/extension.h.

Each build goes through `kgen.judge.evaluate.prebuild`, the CPU compile stage a search runs: static checks,
the sandboxed compile step (bubblewrap; `--no-sandbox` without it), kgen's builder with its
architecture rewrite (one gencode for the target, no PTX). With torch+CUDA (the H100 box) that is a
real `load_inline` build (ninja, nvcc, the C++ compiler, the link); with a CPU torch it is kgen's
nvcc check (`nvcc -c` of the CUDA source and a syntax-only C++ compile of the binding, in parallel).
"cold" clears the candidate's builds (never the PCH, which is made once per machine and reported on
its own line); "warm" asks again for the source just built.

    python benchmarks/cuda_build_times.py --out benchmarks/results/cuda_build_times
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# (problem, candidate file): three of the CUDA starters and two candidates written as LLMs write them
CANDIDATES = [
    ("softmax", "problems/starters/softmax/cuda_two_pass.py"),
    ("layernorm", "problems/starters/layernorm/cuda_persistent_smem.py"),
    ("matmul", "problems/starters/matmul/cuda_sgemm_regblock.py"),
    ("softmax", "benchmarks/cuda_llm_style/softmax_kernelbench.py"),
    ("layernorm", "benchmarks/cuda_llm_style/layernorm_kernelbench.py"),
]


def clear_builds(cache: Path) -> None:
    """Everything kgen built for candidates, not its PCHs."""
    builds = cache / "builds"
    if builds.is_dir():
        for entry in builds.iterdir():
            if entry.name != "torch-pch":
                shutil.rmtree(entry, ignore_errors=True)


def build_once(problem: str, source: str, settings) -> dict:
    from kgen.judge.evaluate import prebuild

    info: dict = {}
    started = time.monotonic()
    result = prebuild(problem, source, settings, info)
    wall = time.monotonic() - started
    builds = info.get("builds") or []
    return {"wall_s": round(wall, 2), "build_s": round(sum(b.get("s", 0.0) for b in builds), 2),
            "outcome": result.outcome if result is not None else "built",
            "message": (result.message[:300] if result is not None else ""),
            "pch": any(b.get("pch") for b in builds), "notes": [b["note"] for b in builds if b.get("note")]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for cuda_build_times.json")
    parser.add_argument("--repeats", type=int, default=1, help="cold builds per candidate and mode")
    parser.add_argument("--only", nargs="*", help="candidate files (default: the five)")
    parser.add_argument("--no-sandbox", action="store_true", help="build without bubblewrap")
    parser.add_argument("--arch", help="compute capability to build for (default: the GPU's, else 9.0)")
    args = parser.parse_args()

    cache = Path(tempfile.mkdtemp(prefix="kgen-build-times-"))
    os.environ["KGEN_CACHE_DIR"] = str(cache)
    import torch

    from kgen.core.records import EvalSettings
    from kgen.harness import cuda_build

    arch = args.arch or (f"{torch.cuda.get_device_capability()[0]}.{torch.cuda.get_device_capability()[1]}"
                         if torch.cuda.is_available() else "9.0")
    settings = EvalSettings(device="cpu", size="small", timeout_s=900, cuda_arch=arch,
                            sandbox="none" if args.no_sandbox else "bwrap")
    candidates = [(p, f) for p, f in CANDIDATES if not args.only or f in args.only or Path(f).name in args.only]
    machine = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
               "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "cpus": os.cpu_count(),
               "load_avg": os.getloadavg(), "arch": cuda_build.sm_name(arch), "nvcc": cuda_build.nvcc_path(),
               "sandbox": settings.sandbox}
    rows = []
    for mode in ("plain", "pch"):
        os.environ["KGEN_TORCH_PCH"] = "0" if mode == "plain" else "1"
        pch_s = None
        if mode == "pch":  # made once per machine, before any candidate needs it
            started = time.monotonic()
            flag_sets = sorted({s for _, f in candidates
                                for s in cuda_build.wanted_pch_flag_sets((REPO / f).read_text())})
            made = [cuda_build.ensure_torch_pch(s, torch.version.cuda is not None) for s in flag_sets]
            pch_s = round(time.monotonic() - started, 2)
            print(f"PCH made for {flag_sets}: {sum(m is not None for m in made)} of {len(made)} in {pch_s} s",
                  flush=True)
        for problem, file in candidates:
            source = (REPO / file).read_text()
            for repeat in range(args.repeats):
                clear_builds(cache)
                cold = build_once(problem, source, settings)
                warm = build_once(problem, source, settings)
                rows.append({"mode": mode, "candidate": file, "repeat": repeat, "cold": cold, "warm": warm,
                             "pch_made_s": pch_s})
                print(f"{mode:5} {file}: cold {cold['wall_s']} s ({cold['outcome']}, pch {cold['pch']}), "
                      f"warm {warm['wall_s']} s", flush=True)
    shutil.rmtree(cache, ignore_errors=True)

    table = ["| candidate | cold, plain (s) | cold, with PCH (s) | warm (s) | outcome |",
             "| --- | --- | --- | --- | --- |"]
    medians = {}
    for _, file in candidates:
        cells = {}
        for mode in ("plain", "pch"):
            mine = [r for r in rows if r["candidate"] == file and r["mode"] == mode]
            cells[mode] = statistics.median(r["cold"]["wall_s"] for r in mine)
            medians.setdefault(mode, []).append(cells[mode])
        warm = statistics.median(r["warm"]["wall_s"] for r in rows if r["candidate"] == file)
        outcome = next(r["cold"]["outcome"] for r in rows if r["candidate"] == file and r["mode"] == "pch")
        table.append(f"| {Path(file).name} | {cells['plain']:.1f} | {cells['pch']:.1f} | {warm:.2f} | {outcome} |")
    table.append(f"| **median** | {statistics.median(medians['plain']):.1f} | {statistics.median(medians['pch']):.1f} "
                 "| | |")
    pch_made = next((r["pch_made_s"] for r in rows if r["pch_made_s"] is not None), None)
    text = "\n".join(table) + f"\n\nPCH made once per machine: {pch_made} s. Machine: {json.dumps(machine)}\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cuda_build_times.json").write_text(json.dumps({"machine": machine, "rows": rows,
                                                                 "table": text}, indent=1))
    (args.out / "cuda_build_times.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
