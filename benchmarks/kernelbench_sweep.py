"""Sweep a folder of KernelBench-format files through kgen on this machine (CPU is enough).

    python benchmarks/kernelbench_sweep.py /tmp/kb/level1 /tmp/kb/level2 --json /tmp/kb/sweep.json
    python benchmarks/kernelbench_sweep.py /tmp/kb/level1/19_ReLU.py --search   # + a one-round offline search

Each file is checked in a subprocess of its own (with a timeout), two at a time, through kgen's Python
API, the same calls `kgen problems FILE` makes: load at the full and the small size, the roofline
figures at both, then the reference built and run on the CPU at the small size. Per file it records:
  * loaded: both sizes load (else the error; `clear` says whether it was a KgenError, which the CLI
    prints as one line with exit 2, or an unexpected exception, which would be a bug);
  * small_elements: inputs + parameters + outputs at the small size;
  * semantics_kept: the shrink set no constant named like a kernel size, stride, dilation, group or
    axis (kgen.problems.problem.SEMANTIC_NAME), and the meta-device record of every module attribute and
    operator argument that says what is computed (kernel_size, stride, groups, dim ...) is the same at
    both sizes, so channels that must divide by groups still do;
  * forward_ok, forward_s: the reference forward on the CPU at the small size, finite outputs whose
    shapes match output_specs (over 20 s is itself a finding: the small size must be small);
  * flops, bytes at both sizes (both must be > 0 for bytes; flops may be 0 only for pure data movement).
With --device cuda (on a GPU machine), also the floor times from the measured ceilings and the
reference at the full size on the GPU, timed once after a warm-up. With --search, also `kgen search
--problem FILE --rounds 1 --candidates 2 --size small --language triton` with the offline proposer in a
fresh DB: whether it ran (exit 0), was refused in one line (exit 2: no starter kernels for the problem,
say) or failed otherwise (a bug), and its last line.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLOW_FORWARD_S = 20.0


def check_one(path: str, device: str = "cpu") -> dict:
    """Run inside the child: every figure for one file, as a dict."""
    sys.path.insert(0, str(ROOT))
    import torch

    from kgen.core.errors import KgenError
    from kgen.problems.problem import SEMANTIC_NAME, _probe, load_problem
    from kgen.problems.roofline import compute_roofline, device_ceilings, problem_figures

    ceilings = device_ceilings() if device == "cuda" else None

    row: dict = {"file": path, "level": Path(path).parent.name, "loaded": False, "clear": True, "error": ""}
    stage = "load full"
    try:
        full = load_problem(path, "full")
        stage = "load small"
        small = load_problem(path, "small")
        row["loaded"] = True
        row["sized_by"] = small.sized_by
        row["changes"] = [f"{n} {a}→{b}" for n, a, b in small.size_changes()]
        stage = "roofline"
        for size, problem in (("full", full), ("small", small)):
            figures = problem_figures(problem, ceilings)  # what `kgen problems` prints
            row[f"floor_ms_{size}"] = figures.floor_ms
            roof = compute_roofline(problem)
            row[f"flops_{size}"], row[f"bytes_{size}"] = roof.flops, roof.bytes_moved
        stage = "semantics"
        probe_full, probe_small = _probe(full), _probe(small)
        row["small_elements"] = probe_small.elements
        renamed = [n for n in small.overrides if SEMANTIC_NAME.search(n)]
        row["semantics_kept"] = not renamed and probe_full.semantics == probe_small.semantics
        if not row["semantics_kept"]:
            row["semantics_note"] = f"semantic names set: {renamed}" if renamed else "operator record differs"
        stage = "forward small"
        model = small.make_model(seed=0)
        inputs = small.make_inputs(seed=1)
        start = time.perf_counter()
        with torch.no_grad():
            out = model(*inputs)
        row["forward_s"] = round(time.perf_counter() - start, 3)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        shapes = [tuple(o.shape) for o in outs if isinstance(o, torch.Tensor)]
        floats = [o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point()]
        finite = all(bool(torch.isfinite(o).all()) for o in floats)
        row["forward_ok"] = finite and shapes == [s.shape for s in small.output_specs()]
        if not row["forward_ok"]:
            row["error"] = "forward: non-finite output" if not finite else f"forward: shapes {shapes} differ from specs"
        if device == "cuda":  # the full size on the GPU: what a search there times against
            stage = "forward full on the GPU"
            model, inputs = full.make_model(seed=0, device="cuda"), full.make_inputs(seed=1, device="cuda")
            with torch.no_grad():
                model(*inputs)
                torch.cuda.synchronize()
                start = time.perf_counter()
                model(*inputs)
                torch.cuda.synchronize()
            row["forward_full_ms"] = round((time.perf_counter() - start) * 1e3, 3)
            row["gpu_peak_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    except KgenError as e:
        row["error"] = f"{stage}: {e}"
    except Exception as e:  # noqa: BLE001  (would be a traceback from the CLI: a kgen bug)
        row["clear"] = False
        row["error"] = f"{stage}: {type(e).__name__}: {e}"
        row["traceback"] = traceback.format_exc(limit=-4)
    return row


def _child_env() -> dict:
    """This checkout's kgen first, whatever else PYTHONPATH holds (the device's bundle of packages)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def run_child(path: str, timeout_s: float, device: str = "cpu") -> dict:
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--one", path, "--device", device], capture_output=True,
                              text=True, timeout=timeout_s, cwd=ROOT, env=_child_env())
    except subprocess.TimeoutExpired:
        return {"file": path, "level": Path(path).parent.name, "loaded": False, "clear": False,
                "error": f"timed out after {timeout_s:.0f} s", "wall_s": timeout_s}
    try:
        row = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        row = {"file": path, "level": Path(path).parent.name, "loaded": False, "clear": False,
               "error": f"child exited {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    row["wall_s"] = round(time.perf_counter() - start, 1)
    return row


def run_search(path: str, timeout_s: float) -> dict:
    """A one-round offline search on a fresh DB: its exit status and outcome (module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "kgen", "search", "--problem", path, "--rounds", "1", "--candidates", "2",
               "--size", "small", "--language", "triton", "--db", os.path.join(tmp, "x.db")]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp,
                                  env=_child_env())
        except subprocess.TimeoutExpired:
            return {"search_rc": None, "search_note": f"timed out after {timeout_s:.0f} s"}
    text = (proc.stdout + proc.stderr).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    # ran: exit 0; refused: exit 2 with one `kgen: error:` line (no starters, say); anything else is a bug
    refused = proc.returncode == 2 and len(errors) == 1 and errors[0].startswith("kgen: error: ")
    outcome = "ran" if proc.returncode == 0 and "Traceback" not in text else "refused" if refused else "bug"
    return {"search_rc": proc.returncode, "search_s": round(time.perf_counter() - start, 1),
            "search_outcome": outcome, "search_note": lines[-1][:300] if lines else ""}


def summarize(rows: list[dict]) -> str:
    out = []
    for level in sorted({r["level"] for r in rows}):
        rs = [r for r in rows if r["level"] == level]
        loaded = sum(r["loaded"] for r in rs)
        fwd = sum(bool(r.get("forward_ok")) for r in rs)
        kept = sum(bool(r.get("semantics_kept")) for r in rs)
        roof = sum(r.get("bytes_full", 0) > 0 and r.get("bytes_small", 0) > 0 for r in rs)
        flops = sum(r.get("flops_full", 0) > 0 and r.get("flops_small", 0) > 0 for r in rs)
        slow = sum(r.get("forward_s", 0) > SLOW_FORWARD_S for r in rs)
        line = (f"{level}: {len(rs)} files, loaded {loaded}, forward ok at small {fwd}, shrink kept semantics {kept}, "
                f"bytes > 0 {roof}, FLOPs > 0 {flops}, forward > {SLOW_FORWARD_S:.0f} s {slow}")
        searched = [r for r in rs if "search_rc" in r]
        if searched:
            ran, refused = (sum(r["search_outcome"] == o for r in searched) for o in ("ran", "refused"))
            line += (f", offline search of {len(searched)}: ran (exit 0) {ran}, refused in one line (exit 2) "
                     f"{refused}, bugs {len(searched) - ran - refused}")
        out.append(line)
        elements = sorted(r["small_elements"] for r in rs if "small_elements" in r)
        if elements:
            out.append(f"  small elements: median {elements[len(elements) // 2]}, max {elements[-1]}")
    bad = [r for r in rows if r["error"] or not r.get("semantics_kept", True) or not r.get("forward_ok")
           or r.get("flops_full", 1) == 0 or r.get("forward_s", 0) > SLOW_FORWARD_S
           or r.get("search_outcome", "ran") != "ran"]
    for r in bad:
        notes = [r["error"]] if r["error"] else []
        if r.get("semantics_note"):
            notes.append(r["semantics_note"])
        if r.get("flops_full", 1) == 0:
            notes.append("0 FLOPs")
        if r.get("forward_s", 0) > SLOW_FORWARD_S:
            notes.append(f"forward {r['forward_s']} s at small")
        if r.get("search_outcome", "ran") != "ran":
            notes.append(f"search {r['search_outcome']}, exit {r['search_rc']}: {r['search_note']}")
        if not r["clear"]:
            notes.append("UNCLEAR (not a KgenError)")
        out.append(f"  {r['level']}/{Path(r['file']).name}: {'; '.join(notes) or 'forward not ok'}")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", help="problem files, or folders of them")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout-s", type=float, default=300)
    p.add_argument("--search", action="store_true", help="also a one-round offline search per file")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="cuda: also the floor times, and the reference at the full size on the GPU, timed once")
    args = p.parse_args()
    if args.one:
        print(json.dumps(check_one(args.one, args.device), default=str))
        return 0
    files = sorted(str(f) for p_ in args.paths for f in (Path(p_).glob("*.py") if Path(p_).is_dir() else [Path(p_)]))
    rows: list[dict] = []

    def work(path: str) -> dict:
        row = run_child(path, args.timeout_s, args.device)
        if args.search:
            row.update(run_search(path, args.timeout_s))
        status = "ok" if row.get("forward_ok") and row.get("semantics_kept") else "FAIL"
        print(f"[{status}] {row['wall_s']:6.1f}s {Path(path).parent.name}/{Path(path).name} {row['error'][:150]}",
              flush=True)
        return row

    start = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(work, files))
    print(summarize(rows))
    print(f"{len(rows)} files in {(time.perf_counter() - start) / 60:.1f} min")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0 if all(r["loaded"] and r.get("forward_ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
