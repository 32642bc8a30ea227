"""Does torch's own forward pass kgen's tolerance rule? Over every KernelBench file given, on every trial
the judge runs (issue 33); and do TF32 and fp16 shortcuts still fail it?

    python benchmarks/precision_sweep.py /work/kb/KernelBench/level{1,2,3}             # CPU, small size
    python benchmarks/precision_sweep.py kb.tar.gz --device cuda --levels level1 level2  # GPU, full size

Paths are problem files, folders of them, or a .tar.gz holding level*/ folders of them (the GPU machine
gets KernelBench as a tarball). Per file, in a worker process of its own (reused from file to file; killed
and replaced when a file runs past --file-timeout-s, which then counts as `skipped: slow`), the judge's
trials: model from one seed, inputs from fresh seeds, the last trial's floating inputs ×100
(kgen.judge.judge.Judge.make_trials); per trial, with kgen's own functions (kgen.judge.verify):
  * ref: the float64 forward, and torch's own forward in the problem's dtype at full precision (TF32
    off), measured against it (own normwise / elementwise error, elements that overflow);
  * fp32: a second forward in the dtype, as a user would run it, judged by kgen's rule (must pass)
    and by the rule before issue 33 (rtol alone: what failed);
  * alt: an honest fp32 computation that sums in another order (`_alt_mode`: matrix products
    accumulated in blocks of K, operators through torch's decompositions; oneDNN off on CPU, cuDNN off
    on CUDA, so convolutions take torch's own im2col + GEMM); its error over torch's own is the
    evidence for the factor kgen allows (kgen.judge.verify.OWN_ERROR_FACTOR);
  * tf32: on CUDA the eager forward with TF32 on (cuBLAS and cuDNN); on CPU emulated: every float32
    input of a matmul, convolution or attention op rounded to TF32's 10-bit mantissa (what TF32 tensor
    cores do), accumulated in fp32;
  * fp16: the model and inputs in float16, its output cast back (n/a where an op has no fp16 kernel);
  * eager_default (CUDA only): the forward with torch's default flags (cuDNN allows TF32 by default).
On CUDA the extras run on the first and the ×100 trial only (the GPU's minutes go to covering every file);
--budget-s stops starting files, and --resume runs only those an earlier run did not finish.
Writes precision_sweep.json and precision_sweep.md under --out (default $OUT, else
benchmarks/results/precision-<device>). Exit 0 when torch's fp32 passed every trial of every file done.
"""
import argparse
import copy
import json
import os
import queue
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROW = "@@ROW "
ALT_BLOCK_K = 32
KEEP_BYTES = 4 << 30  # a file's trial tensors kept for the extras up to this much, else computed again
MODEL_SEED = 12345
TRIAL_SEEDS = [101, 202, 303, 404, 505]
SCALES = [1.0, 1.0, 1.0, 1.0, 100.0]  # as the judge: the last trial's floating inputs ×100


def _round_tf32(t):
    """t rounded to TF32 (10-bit mantissa, to nearest even), still float32."""
    import torch

    bits = t.contiguous().view(torch.int32)
    rounded = (bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF
    return torch.where(torch.isfinite(t), rounded.view(torch.float32), t)


def _tf32_mode():
    """A dispatch mode that rounds the float32 inputs of matmul, convolution and attention ops to TF32."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    pattern = re.compile(r"mm|conv|scaled_dot_product|linear|rnn|lstm|gru|einsum")

    def cast(x):
        return _round_tf32(x) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x

    class TF32(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if pattern.search(func.__name__):
                args = tuple([cast(y) for y in a] if isinstance(a, (list, tuple)) else cast(a) for a in args)
            return func(*args, **(kwargs or {}))

    return TF32()


def _alt_mode():
    """A dispatch mode that computes in fp32 in another order, as a hand-written kernel would: matrix
    products accumulated over K in blocks of ALT_BLOCK_K (a tiled GEMM's order), and every operator torch
    has a decomposition for (softmax, layer/group norm, GELU, ...) through it (amax, exp, sum, ...)."""
    import torch
    from torch._decomp import decomposition_table
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten

    def blocked(a, b):
        acc = a[..., :ALT_BLOCK_K] @ b[..., :ALT_BLOCK_K, :]
        for k in range(ALT_BLOCK_K, a.shape[-1], ALT_BLOCK_K):
            acc = acc + a[..., k:k + ALT_BLOCK_K] @ b[..., k:k + ALT_BLOCK_K, :]
        return acc

    class Alt(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in (aten.mm.default, aten.bmm.default) and args[0].shape[-1] > ALT_BLOCK_K:
                return blocked(args[0], args[1])
            if func in (aten.addmm.default, aten.baddbmm.default) and not kwargs and len(args) == 3 \
                    and args[1].shape[-1] > ALT_BLOCK_K:
                return args[0] + blocked(args[1], args[2])
            decomposed = decomposition_table.get(func)
            if decomposed is not None:
                out = decomposed(*args, **kwargs)
                if out is not NotImplemented:
                    return out
            return func(*args, **kwargs)

    return Alt()


def _judged(outs, refs, owns, dtype, rtol):
    """kgen's rule over every output of one forward: (ok, worst normwise, worst elementwise, message)."""
    import torch

    from kgen.judge import verify

    ok, norm, elem, message = True, 0.0, 0.0, ""
    for k, (o, r) in enumerate(zip(outs, refs)):
        if isinstance(o, torch.Tensor) and o.dtype != dtype and o.is_floating_point():
            o = o.to(dtype)
        c = verify.compare(o, r, dtype, rtol, f"output[{k}]", own=owns[k])
        ok = ok and c.ok
        norm = max(norm, c.norm_rel_err if c.norm_rel_err is not None else 0.0)
        elem = max(elem, c.elem_err if c.elem_err is not None else 0.0)
        message = message or c.message
    return ok, norm, elem, message[:300]


def _extras_on(device: str, t: int) -> bool:
    """On CUDA the extras run on the first and the ×100 trial only: the GPU's minutes go to every file."""
    return device != "cuda" or t in (0, len(SCALES) - 1)


def check_one(path: str, device: str, size: str, extras: bool, emit) -> dict:
    """One file's trials (module docstring); `emit(row)` is called with the row so far after each stage."""
    sys.path.insert(0, str(ROOT))
    import torch

    from kgen.judge import verify
    from kgen.problems.problem import load_problem

    row: dict = {"file": path, "level": Path(path).parent.name, "name": Path(path).stem, "status": "error",
                 "error": "", "trials": []}
    stage = "load"
    started = time.perf_counter()
    try:
        problem = load_problem(path, size)
        stage = "model"
        model = problem.make_model(MODEL_SEED, device)
        model64 = copy.deepcopy(model).to(torch.float64)
        dtype, kept, kept_bytes = None, {}, 0
        for t, (seed, scale) in enumerate(zip(TRIAL_SEEDS, SCALES)):
            stage = f"trial {t + 1} reference"
            inputs = problem.make_inputs(seed, device, scale)
            refs, owns = verify.reference_and_own_error(model, model64, inputs)
            fp32 = verify.dtype_outputs(model, inputs)
            size = sum(x.numel() * x.element_size() for x in [*inputs, *refs, *fp32] if isinstance(x, torch.Tensor))
            if extras and _extras_on(device, t) and kept_bytes + size <= KEEP_BYTES:  # needed again: keep, or remake
                kept[t], kept_bytes = (inputs, refs, owns, fp32), kept_bytes + size
            dtype = dtype or next((o.dtype for o in fp32 if isinstance(o, torch.Tensor)), torch.float32)
            rtol = verify.default_rtol(dtype)
            trial = {"seed": seed, "scale": scale,
                     "own_norm": max((o.norm_rel_err for o in owns if o), default=0.0),
                     "own_elem": max((o.elem_err for o in owns if o), default=0.0),
                     "overflow": sum(o.overflow for o in owns if o)}
            stage = f"trial {t + 1} fp32"
            trial["fp32_ok"], _, _, trial["fp32_msg"] = _judged(fp32, refs, owns, dtype, rtol)
            trial["old_rule_ok"], _, _, trial["old_rule_msg"] = _judged(fp32, refs, [None] * len(refs), dtype, rtol)
            row["trials"].append(trial)
            if device == "cuda":
                torch.cuda.synchronize()
        row["dtype"] = str(dtype).removeprefix("torch.")
        row["status"] = "done"
        row["core_s"] = round(time.perf_counter() - started, 2)
        emit(row)
        if extras:
            for t, (seed, scale) in enumerate(zip(TRIAL_SEEDS, SCALES)):
                if not _extras_on(device, t):
                    continue
                trial = row["trials"][t]
                if t in kept:
                    inputs, refs, owns, fp32 = kept.pop(t)
                else:
                    inputs = problem.make_inputs(seed, device, scale)
                    refs, owns = verify.reference_and_own_error(model, model64, inputs)
                    fp32 = verify.dtype_outputs(model, inputs)
                rtol = verify.default_rtol(dtype)
                for name, run in _extras(model, inputs, device).items():
                    stage = f"trial {t + 1} {name}"
                    try:
                        outs = run()
                    except Exception as e:  # noqa: BLE001 - an op without that dtype's kernel, or no memory: n/a
                        if device == "cuda":
                            torch.cuda.empty_cache()
                        trial[f"{name}_ok"] = None
                        trial[f"{name}_msg"] = f"n/a: {type(e).__name__}: {str(e)[:120]}"
                        continue
                    ok, norm, elem, msg = _judged(outs, refs, owns, dtype, rtol)
                    trial.update({f"{name}_ok": ok, f"{name}_norm": norm, f"{name}_elem": elem, f"{name}_msg": msg,
                                  f"{name}_same": verify.same_tensors(outs, fp32)})  # the shortcut changed nothing
                emit(row)
    except torch.OutOfMemoryError as e:
        row["error"] = f"{stage}: out of memory: {str(e).splitlines()[0][:200]}"
    except Exception as e:  # noqa: BLE001 - recorded per file; the sweep goes on
        row["error"] = f"{stage}: {type(e).__name__}: {str(e)[:300]}"
        row["traceback"] = traceback.format_exc(limit=-3)[-1500:]
    finally:
        if device == "cuda":
            torch.cuda.empty_cache()
    row["wall_s"] = round(time.perf_counter() - started, 2)
    return row


def _extras(model, inputs, device: str) -> dict:
    """The other computations of the module docstring, each a function returning the outputs."""
    import torch

    from kgen.judge import verify

    def alt():
        if device == "cuda":
            with torch.backends.cudnn.flags(enabled=False), _alt_mode():
                return verify.dtype_outputs(model, inputs)
        with torch.backends.mkldnn.flags(enabled=False), _alt_mode():
            return verify.dtype_outputs(model, inputs)

    def tf32():
        if device == "cuda":
            saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
            try:
                with torch.no_grad():
                    return verify.as_outputs(model(*verify.clone_inputs(inputs)))
            finally:
                torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
        with torch.no_grad(), _tf32_mode():
            return verify.as_outputs(model(*verify.clone_inputs(inputs)))

    def fp16():
        half = copy.deepcopy(model).to(torch.float16)
        with torch.no_grad():
            outs = verify.as_outputs(half(*[x.half() if isinstance(x, torch.Tensor) and x.is_floating_point()
                                           else x for x in verify.clone_inputs(inputs)]))
        return [o.float() if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in outs]

    def eager_default():
        with torch.no_grad():
            return verify.as_outputs(model(*verify.clone_inputs(inputs)))

    runs = {"alt": alt, "tf32": tf32, "fp16": fp16}
    if device == "cuda":
        runs["eager_default"] = eager_default
    return runs


def worker(device: str, size: str, extras: bool) -> None:
    """Read file paths from stdin, one a line; write each row (and rows so far) as ROW-prefixed lines."""
    def emit(row: dict) -> None:
        sys.stdout.write(ROW + json.dumps(dict(row, partial=True), default=str) + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        row = check_one(line.strip(), device, size, extras, emit)
        sys.stdout.write(ROW + json.dumps(row, default=str) + "\n")
        sys.stdout.flush()


class Worker:
    """A worker process and a thread reading its rows into a queue."""

    def __init__(self, args: argparse.Namespace, log: Path):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        cmd = [sys.executable, __file__, "--worker", "--device", args.device, "--size", args.size]
        if args.no_extras:
            cmd.append("--no-extras")
        with open(log, "a") as stderr:  # the workers' warnings and crashes, for a look afterwards
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                         text=True, cwd=ROOT, env=env)
        self.rows: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith(ROW):
                self.rows.put(json.loads(line[len(ROW):]))
        self.rows.put(None)

    def check(self, path: str, timeout_s: float) -> dict:
        """The file's row; on timeout or a crash the row so far, marked, and the process is gone."""
        self.proc.stdin.write(path + "\n")
        self.proc.stdin.flush()
        deadline, last = time.monotonic() + timeout_s, None
        while True:
            try:
                row = self.rows.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                base = last or {"file": path, "level": Path(path).parent.name, "name": Path(path).stem,
                                "trials": [], "error": ""}
                status = "done" if last and last.get("status") == "done" else "skipped: slow"
                return dict(base, status=status, partial=True,
                            note=f"stopped after {timeout_s:.0f} s" + (" (extras unfinished)" if last else ""))
            if row is None:
                self.kill()
                base = last or {"file": path, "level": Path(path).parent.name, "name": Path(path).stem, "trials": []}
                return dict(base, status="error", error=f"worker died (exit {self.proc.returncode})")
            if not row.pop("partial", False):
                return row
            last = row

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def problem_files(paths: list[str], levels: list[str], tmp: str) -> list[str]:
    def number(f: Path) -> tuple:
        m = re.match(r"(\d+)", f.name)
        return (f.parent.name, int(m.group(1)) if m else 10**9, f.name)

    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_file() and p.name.endswith((".tar.gz", ".tgz", ".tar")):
            with tarfile.open(p) as tar:
                try:
                    tar.extractall(tmp, filter="data")
                except TypeError:  # a Python without extraction filters: the tarball is the lead's own
                    tar.extractall(tmp)
            files += [f for f in Path(tmp).rglob("*.py") if f.parent.name.startswith("level")]
        elif p.is_dir():
            files += sorted(p.glob("*.py"))
        elif p.is_file():
            files.append(p)
        else:
            raise SystemExit(f"precision_sweep: no such file or folder: {p}")
    if levels:
        files = [f for f in files if f.parent.name in levels]
    return [str(f) for f in sorted(set(files), key=number)]


def summarize(rows: list[dict], meta: dict) -> str:
    def trials_ok(r, key):
        values = [t.get(key) for t in r["trials"] if t.get(key) is not None]
        return bool(values) and all(values)

    def rejected(r, key):  # the shortcut failed kgen's rule on at least one trial
        return any(t.get(key) is False for t in r["trials"])

    lines = [f"Device: {meta['device']}; size {meta['size']}; torch {meta['torch']}; factor "
             f"{meta['factor']:g}; {meta['minutes']:.1f} min; command: `{meta['command']}`", "",
             "| level | files | done | skipped (slow / budget) | errors | torch fp32 passes every trial | failed "
             "the old rule (rtol only) | trials with fp32 overflow | alt fp32 passes | worst alt/own (norm, elem) "
             "| TF32 rejected (of files it changes) | fp16 rejected |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    notes_after: list[str] = []
    for level in sorted({r["level"] for r in rows}):
        rs = [r for r in rows if r["level"] == level]
        done = [r for r in rs if r.get("status") == "done"]
        slow = sum(r.get("status") == "skipped: slow" for r in rs)
        budget = sum(r.get("status") == "skipped: budget" for r in rs)
        errors = sum(r.get("status") == "error" for r in rs)
        fp32 = sum(trials_ok(r, "fp32_ok") for r in done)
        old = sum(not trials_ok(r, "old_rule_ok") for r in done)
        overflow = sum(t.get("overflow", 0) > 0 for r in done for t in r["trials"])
        with_alt = [r for r in done if any(t.get("alt_ok") is not None for t in r["trials"])]
        alt = sum(trials_ok(r, "alt_ok") for r in with_alt)
        ratios_n = [t["alt_norm"] / t["own_norm"] for r in done for t in r["trials"]
                    if t.get("alt_norm") is not None and t.get("own_norm", 0) > 0]
        ratios_e = [t["alt_elem"] / t["own_elem"] for r in done for t in r["trials"]
                    if t.get("alt_elem") is not None and t.get("own_elem", 0) > 0]
        worst = f"{max(ratios_n):.2f}, {max(ratios_e):.2f}" if ratios_n and ratios_e else "-"
        tf32 = [r for r in done if any(t.get("tf32_ok") is not None and not t.get("tf32_same") for t in r["trials"])]
        fp16 = [r for r in done if any(t.get("fp16_ok") is not None for t in r["trials"])]
        lines.append(f"| {level} | {len(rs)} | {len(done)} | {slow} / {budget} | {errors} | {fp32} of {len(done)} | "
                     f"{old} | {overflow} | {alt} of {len(with_alt)} | {worst} | "
                     f"{sum(rejected(r, 'tf32_ok') for r in tf32)} of {len(tf32)} | "
                     f"{sum(rejected(r, 'fp16_ok') for r in fp16)} of {len(fp16)} |")
        eager = [r for r in done if any(t.get("eager_default_ok") is not None for t in r["trials"])]
        if eager:
            notes_after.append(f"{level}: torch's eager forward with its default flags (cuDNN may use TF32) fails "
                               f"kgen's rule on {sum(rejected(r, 'eager_default_ok') for r in eager)} of "
                               f"{len(eager)} files (by design: the bar is full fp32's)")
    lines += ["", *notes_after, "", "Files of note (own = torch fp32's own error against float64, worst trial):", ""]
    unstarted = [r for r in rows if r.get("status") == "skipped: budget"]
    if unstarted:
        first, last = (f"{r['level']}/{r['name']}" for r in (unstarted[0], unstarted[-1]))
        lines.append(f"- not started (--budget-s spent): {len(unstarted)} files, {first} to {last}")
    for r in rows:
        done = r.get("status") == "done"
        notes = []
        if r in unstarted:
            continue
        if not done:
            notes.append(f"{r.get('status')}: {r.get('error') or r.get('note', '')}"[:200])
        else:
            bad = [t for t in r["trials"] if t.get("fp32_ok") is False]
            if bad:
                notes.append(f"**torch fp32 FAILS** (×{bad[0]['scale']:g}): {bad[0]['fp32_msg'][:160]}")
            if not trials_ok(r, "old_rule_ok"):
                failed = [t for t in r["trials"] if t.get("old_rule_ok") is False]
                notes.append(f"failed the old rule on {len(failed)} trial(s) (scales "
                             + ", ".join(f"×{t['scale']:g}" for t in failed) + ")")
            if any(t.get("overflow", 0) for t in r["trials"]):
                notes.append(f"fp32 overflow on {sum(t.get('overflow', 0) > 0 for t in r['trials'])} trial(s), "
                             "not counted")
            if any(t.get("alt_ok") is False for t in r["trials"]):
                notes.append("alt fp32 FAILS")
            if rejected(r, "eager_default_ok"):
                notes.append("eager with torch's default flags fails")
            if any(t.get("tf32_ok") is not None and not t.get("tf32_same") for t in r["trials"]) \
                    and not rejected(r, "tf32_ok"):
                notes.append("TF32 passes every trial")
            if r.get("note"):
                notes.append(r["note"])
        if notes:
            own = max((t.get("own_norm", 0.0) for t in r["trials"]), default=0.0)
            own_e = max((t.get("own_elem", 0.0) for t in r["trials"]), default=0.0)
            lines.append(f"- {r['level']}/{r['name']}: {'; '.join(notes)} (own: normwise {own:.2g}, "
                         f"elementwise {own_e:.2g})")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", help="problem files, folders of them, or a .tar.gz of level*/ folders")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--size", choices=["small", "full"], help="default: small on cpu, full on cuda")
    p.add_argument("--levels", nargs="*", default=[], help="only these level folders (level1 level2 ...)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--file-timeout-s", type=float, help="per file (default 600 on cpu, 40 on cuda)")
    p.add_argument("--budget-s", type=float, default=0, help="start no file after this many seconds (0: no limit)")
    p.add_argument("--no-extras", action="store_true", help="only the reference and torch's fp32 forward")
    p.add_argument("--resume", metavar="JSON", help="keep the rows of an earlier run's precision_sweep(.partial).json "
                                                    "that finished (done, slow, error); run the others")
    p.add_argument("--out", help="folder for the JSON and the table (default $OUT, else benchmarks/results/...)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.size = args.size or ("full" if args.device == "cuda" else "small")
    if args.worker:
        worker(args.device, args.size, not args.no_extras)
        return 0
    timeout_s = args.file_timeout_s or (40.0 if args.device == "cuda" else 600.0)
    out = Path(args.out or os.environ.get("OUT") or ROOT / "benchmarks" / "results" / f"precision-{args.device}")
    out.mkdir(parents=True, exist_ok=True)
    import torch

    from kgen.judge.verify import OWN_ERROR_FACTOR

    if args.device == "cuda" and not torch.cuda.is_available():
        print("precision_sweep: --device cuda but torch sees no GPU; nothing done", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        files = problem_files(args.paths, args.levels, tmp)
        if not files:
            print("precision_sweep: no problem files found", file=sys.stderr)
            return 2
        rows: dict[str, dict] = {}
        if args.resume:
            earlier = json.loads(Path(args.resume).read_text())
            earlier = earlier["rows"] if isinstance(earlier, dict) else earlier
            finished = {f"{r['level']}/{r['name']}": r for r in earlier if r.get("status") != "skipped: budget"}
            rows = {f: finished[f"{Path(f).parent.name}/{Path(f).stem}"] for f in files
                    if f"{Path(f).parent.name}/{Path(f).stem}" in finished}
        todo: queue.Queue = queue.Queue()
        for f in files:
            if f not in rows:
                todo.put(f)
        lock = threading.Lock()
        started = time.monotonic()

        def run_jobs() -> None:
            w = None
            while True:
                try:
                    path = todo.get_nowait()
                except queue.Empty:
                    break
                if args.budget_s and time.monotonic() - started > args.budget_s:
                    rows[path] = {"file": path, "level": Path(path).parent.name, "name": Path(path).stem,
                                  "trials": [], "status": "skipped: budget", "error": ""}
                    continue
                w = w if w is not None and w.proc.poll() is None else Worker(args, out / "workers-stderr.log")
                row = w.check(path, timeout_s)
                rows[path] = row
                with lock:  # the rows so far, after every file: a run cut short still leaves them
                    (out / "precision_sweep.partial.json").write_text(json.dumps(list(rows.values()), default=str))
                fp32 = "ok" if row.get("trials") and all(t.get("fp32_ok") for t in row["trials"]) else "--"
                print(f"[{row.get('status', '?')[:13]:13}] fp32 {fp32} {row.get('wall_s', timeout_s):6.1f}s "
                      f"{row['level']}/{row['name']} {(row.get('error') or '')[:120]}", flush=True)
            if w is not None:
                w.kill()

        threads = [threading.Thread(target=run_jobs) for _ in range(max(1, args.jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ordered = [rows[f] for f in files]
    for r in ordered:  # where the files were extracted says nothing
        r["file"] = f"{r['level']}/{Path(r['file']).name}"
    meta = {"device": torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({os.cpu_count()} cores)",
            "size": args.size, "torch": torch.__version__, "factor": OWN_ERROR_FACTOR,
            "minutes": (time.monotonic() - started) / 60, "command": " ".join(["python", *sys.argv])}
    (out / "precision_sweep.json").write_text(json.dumps({"meta": meta, "rows": ordered}, indent=1, default=str))
    table = summarize(ordered, meta)
    (out / "precision_sweep.md").write_text(table)
    print(table)
    print(f"wrote {out / 'precision_sweep.json'} and {out / 'precision_sweep.md'}")
    failing = [r for r in ordered if r.get("status") == "done" and not all(t.get("fp32_ok") for t in r["trials"])]
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
