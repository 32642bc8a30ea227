"""Device probe (issue 17): does Nsight Compute profile a process inside kgen's bubblewrap sandbox, and
what does Triton's cache hold after one compile.  python3 benchmarks/probe_ncu.py $OUT"""
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from kgen.harness import seccomp  # noqa: F401
from kgen.judge import sandbox

out = sys.argv[1]
probe = "/tmp/kgen-probe"
os.makedirs(probe, exist_ok=True)
os.chmod(probe, 0o755)
TARGET = r'''
import os, sys, json, glob, torch, triton, triton.language as tl
print("listener:", hasattr(triton, "knobs") and hasattr(triton.knobs.compilation, "listener"))
hits = []
try:
    triton.knobs.compilation.listener = lambda **kw: hits.append(bool(kw.get("cache_hit")))
except Exception as e:
    print("no listener", e)

@triton.jit
def softmax_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=-float("inf"))
    x = x - tl.max(x, 0)
    e = tl.exp(x)
    tl.store(y_ptr + row * n + offs, e / tl.sum(e, 0), mask=offs < n)

x = torch.randn(4096, 8192, device="cuda")
y = torch.empty_like(x)
softmax_kernel[(4096,)](x, y, 8192, BLOCK=8192)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
softmax_kernel[(4096,)](x, y, 8192, BLOCK=8192)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
print("ok", float((y - torch.softmax(x, 1)).abs().max()), "hits", hits)
cache = os.environ.get("TRITON_CACHE_DIR") or os.path.expanduser("~/.triton/cache")
for d in sorted(glob.glob(cache + "/*")):
    print("entry", os.path.basename(d)[:12], sorted((f, os.path.getsize(os.path.join(d, f))) for f in os.listdir(d)))
'''
with open(f"{probe}/target.py", "w") as f:
    f.write(TARGET)
os.chmod(f"{probe}/target.py", 0o644)
ncu = (sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu")) or [shutil.which("ncu")])[-1]
ncu_root = os.path.dirname(os.path.realpath(ncu))
print("ncu", ncu, ncu_root)
SECTIONS = ["--section", "SpeedOfLight", "--section", "Occupancy", "--section", "LaunchStats",
            "--section", "WarpStateStats", "--section", "MemoryWorkloadAnalysis"]
results = {}


def attempt(name, wrap, extra, log, env=None, **kw):
    argv = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
            "--csv", "--page", "raw", "--log-file", log, *extra, sys.executable, f"{probe}/target.py"]
    argv = wrap(argv)
    t = time.time()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=env, **kw)
        rc, so, se = done.returncode, done.stdout, done.stderr
    except Exception as e:  # noqa: BLE001
        rc, so, se = "exc", "", repr(e)
    text = Path(log).read_text() if os.path.exists(log) else ""
    results[name] = {"rc": rc, "s": round(time.time() - t, 1), "stdout": so[-3000:], "stderr": se[-3000:],
                     "log_chars": len(text)}
    with open(f"{out}/ncu_{name}.csv", "w") as f:
        f.write(text)
    print(name, results[name]["rc"], results[name]["s"], "log", len(text), so[-400:], se[-600:])


if sys.argv[2:] == ["record"]:  # tests/data/ncu_softmax_h100.csv: kgen's own ncu command line, in the sandbox
    from kgen.harness.seccomp import escape_filter_bpf
    from kgen.judge.ncu_profile import find_ncu, ncu_argv

    logdir = "/tmp/kgen-probe-record"
    shutil.rmtree(logdir, ignore_errors=True)
    os.makedirs(logdir)
    kgen_ncu = find_ncu()
    spec = sandbox.SandboxSpec(gpu=True, read_only=[kgen_ncu.parent, Path(probe)], writable=[Path(logdir)])
    fd = os.memfd_create("s")
    os.write(fd, escape_filter_bpf())
    os.lseek(fd, 0, 0)
    argv = sandbox.bwrap_command([*ncu_argv(kgen_ncu, Path(logdir) / "ncu.csv"), sys.executable, f"{probe}/target.py"],
                                 spec, fd, "/tmp")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, pass_fds=[fd], cwd="/",
                          env=sandbox.sandbox_env(spec, sandbox.SandboxMode.BWRAP, "/tmp"))
    print("record", done.returncode, done.stdout[-500:], done.stderr[-1500:])
    shutil.copy(Path(logdir) / "ncu.csv", f"{out}/ncu_softmax_h100.csv")
    sys.exit(0)
os.environ["TRITON_CACHE_DIR"] = "/tmp/kgen-probe-cache-plain"
# attempt("plain_sections", lambda a: a, SECTIONS, "/tmp/ncu_plain.csv")
METRICS = ["--metrics", "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio,"
        "gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,"
        "sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,"
        "smsp__sass_inst_executed_op_local_ld.sum,smsp__sass_inst_executed_op_local_st.sum"]
# attempt("plain_metrics", lambda a: a, METRICS, "/tmp/ncu_metrics.csv")

logdir = "/tmp/kgen-probe-log"
os.makedirs(logdir, exist_ok=True)
for as_nobody in (True, False):
    if os.path.exists(logdir):
        shutil.rmtree(logdir)
    os.makedirs(logdir)
    spec = sandbox.SandboxSpec(gpu=True, read_only=[sandbox.Path(ncu_root), sandbox.Path(probe)],
                               writable=[sandbox.Path(logdir)])
    from kgen.harness.seccomp import escape_filter_bpf
    fd = os.memfd_create("s")
    os.write(fd, escape_filter_bpf())
    os.lseek(fd, 0, 0)
    env = sandbox.sandbox_env(spec, sandbox.SandboxMode.BWRAP, "/tmp")
    kw = {"pass_fds": [fd]}
    if as_nobody:
        for r, _, _ in os.walk(logdir):
            os.chown(r, 65534, 65534)
        kw.update(user=65534, group=65534, extra_groups=[])
    attempt(f"bwrap_{'nobody' if as_nobody else 'root'}",
            lambda a, spec=spec, fd=fd: sandbox.bwrap_command(a, spec, fd, "/tmp"), METRICS, f"{logdir}/ncu.csv",
            env=env, cwd="/", **kw)
    os.close(fd)
Path(f"{out}/probe_ncu.json").write_text(json.dumps(results, indent=1))
