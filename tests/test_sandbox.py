"""The sandbox and the judge's link to it, on their own: bubblewrap's view of the machine, the seccomp
filters, the environment allow-list, bounded logs, the framed channel, the shared arena, and the
ablation rewrite. Real processes, real bwrap, real libseccomp; nothing mocked."""

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kgen.harness import seccomp
from kgen.harness.protocol import BadFrame, Channel, ChannelTimeout, HostArena, Layout, RunnerJob
from kgen.judge.ablation import ablate_triton_kernels, ablated_kernel_names
from kgen.judge.sandbox import (
    BoundedLog,
    SandboxMode,
    SandboxSpec,
    bwrap_command,
    bwrap_path,
    kgen_package_dir,
    sandbox_env,
)

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")


def _in_sandbox(code: str, spec: SandboxSpec = None, extra_env=None) -> subprocess.CompletedProcess:
    """Run `python -c code` the way the judge runs its runner: bubblewrap, the escape filter, the
    allow-listed environment."""
    spec = spec or SandboxSpec()
    fd = os.memfd_create("seccomp")
    os.write(fd, seccomp.escape_filter_bpf())
    os.lseek(fd, 0, os.SEEK_SET)
    env = sandbox_env(spec, SandboxMode.BWRAP, "/tmp")
    try:
        return subprocess.run(bwrap_command([sys.executable, "-c", textwrap.dedent(code)], spec, fd, "/tmp"),
                              capture_output=True, text=True, pass_fds=[fd], env=dict(env, **(extra_env or {})),
                              timeout=120)
    finally:
        os.close(fd)


def test_the_sandbox_sees_its_own_pids_no_network_and_no_capabilities():
    done = _in_sandbox("""
        import os, json
        status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        try:
            import socket; socket.socket(); net = "socket allowed"
        except OSError as e:
            net = e.errno
        print(json.dumps({"uid": os.getuid(), "pids": pids, "cap": status["CapEff"].strip(),
                          "nnp": status["NoNewPrivs"].strip(), "seccomp": status["Seccomp"].strip(), "net": net}))
    """)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["uid"] == 65534
    assert len(seen["pids"]) <= 3  # bubblewrap's reaper, python, and nothing of the host
    assert int(seen["cap"], 16) == 0 and seen["nnp"] == "1" and seen["seccomp"] == "2"
    assert seen["net"] == 1  # EPERM: no network socket (a Unix one is allowed, and reaches nothing)


def test_escape_calls_are_refused():
    done = _in_sandbox("""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        results = {}
        for name, call in {"umount2 /proc": lambda: libc.umount2(b"/proc", 2),
                           "unshare user": lambda: libc.unshare(0x10000000),
                           "mount tmpfs": lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None),
                           "ptrace pid 1": lambda: libc.ptrace(16, 1, 0, 0)}.items():
            rc = call()
            results[name] = (rc, ctypes.get_errno())
        print(results)
        print(sorted(os.listdir("/proc/1")) [:3])
    """)
    assert done.returncode == 0, done.stderr
    results = eval(done.stdout.splitlines()[0])
    for name, (rc, err) in results.items():
        assert rc == -1 and err in (1, 13), f"{name}: rc {rc} errno {err}"


def test_the_filesystem_is_read_only_and_shows_only_what_python_needs(tmp_path):
    secret_dir = tmp_path / "home-like"
    secret_dir.mkdir()
    (secret_dir / "id_rsa").write_text("PRIVATE")
    kgen_file = kgen_package_dir() / "judge" / "judge.py"
    done = _in_sandbox(f"""
        import os
        try:
            open({str(kgen_file)!r}, "a").write("# tampered")
            print("WROTE")
        except OSError as e:
            print("refused", e.errno)
        print(os.path.exists({str(secret_dir)!r}), os.path.exists({str(kgen_package_dir().parent / 'README.md')!r}))
        open("/tmp/scratch", "w").write("ok")
        print(open("/tmp/scratch").read())
    """)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert lines[:2] == ["refused", "30"]  # EROFS
    assert lines[2:4] == ["False", "False"]  # no home, no repository around the package
    assert lines[4] == "ok"  # its own tmpfs is writable
    assert "# tampered" not in kgen_file.read_text()


def test_environment_is_an_allow_list(monkeypatch):
    monkeypatch.setenv("LLM_CREDENTIAL", "cred-not-for-candidates")
    monkeypatch.setenv("KGEN_DB", "postgresql://user:pw-not-for-candidates@db/kgen")
    monkeypatch.setenv("WHATEVER_NAME", "also-not")
    env = sandbox_env(SandboxSpec(), SandboxMode.BWRAP, "/tmp")
    assert not {"LLM_CREDENTIAL", "KGEN_DB", "WHATEVER_NAME"} & set(env)
    done = _in_sandbox("import os; print(sorted(os.environ.items()))")
    assert "not-for-candidates" not in done.stdout and "also-not" not in done.stdout


def test_no_new_processes_filter_refuses_fork_and_exec():
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import ctypes, os, subprocess
        ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)
        from kgen.harness import seccomp
        seccomp.load_no_new_processes(block_threads=False)
        out = []
        for name, fn in {"fork": os.fork, "run": lambda: subprocess.run(["true"])}.items():
            try:
                fn(); out.append(name + " allowed")
            except OSError as e:
                out.append(f"{name} {e.errno}")
        import threading
        t = threading.Thread(target=lambda: None); t.start(); t.join(); out.append("thread ok")
        print(out)
    """)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert eval(done.stdout) == ["fork 1", "run 1", "thread ok"]


def test_bounded_log_keeps_head_and_tail():
    log = BoundedLog()
    log.feed(b"HEAD" + b"x" * 100_000)
    log.feed(b"y" * 50_000 + b"TAIL")
    text = log.text()
    assert text.startswith("HEAD") and text.endswith("TAIL")
    assert "bytes cut" in text and len(text) < 25_000
    assert log.total == 150_008


def test_channel_frames_fds_and_limits():
    a, b = socket.socketpair()
    left, right = Channel(a), Channel(b)
    r, w = os.pipe()
    left.send({"type": "hello", "n": 1}, fds=(r,))
    assert right.receive(timeout_s=5) == {"type": "hello", "n": 1}
    (got,) = right.take_fds()
    os.write(w, b"z")
    assert os.read(got, 1) == b"z"
    with pytest.raises(ChannelTimeout):
        right.receive(timeout_s=0.1)
    a.sendall((10**9).to_bytes(4, "big"))
    with pytest.raises(BadFrame):
        right.receive(timeout_s=5)
    c, d = socket.socketpair()
    c.sendall(len(b"[1,2]").to_bytes(4, "big") + b"[1,2]")
    with pytest.raises(BadFrame):
        Channel(d).receive(timeout_s=5)


def test_host_arena_is_shared_between_processes_and_regions_are_aligned():
    layout = Layout()
    x = layout.add("x", "float32", (3, 5), 4)
    y = layout.add("y", "int64", (7,), 8)
    assert x.offset == 0 and y.offset % 512 == 0 and layout.size >= y.offset + 56
    arena = HostArena(layout.size)
    arena.tensor(x).copy_(torch.arange(15, dtype=torch.float32).view(3, 5))
    code = ("import os, sys, torch; from kgen.harness.protocol import HostArena, Layout;"
            "layout = Layout.from_json(__import__('json').loads(sys.argv[2]));"
            "a = HostArena(layout.size, int(sys.argv[1]));"
            "x = a.tensor(layout.regions['x']); a.tensor(layout.regions['y']).copy_(torch.arange(7) * 2);"
            "print(float(x.sum()))")
    done = subprocess.run([sys.executable, "-c", code, str(arena.fd), json.dumps(layout.to_json())],
                          capture_output=True, text=True, pass_fds=[arena.fd], timeout=60)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == 105.0
    assert arena.tensor(y).tolist() == [0, 2, 4, 6, 8, 10, 12]


def test_runner_job_round_trips_as_one_record():
    job = RunnerJob(mode="run", device="cpu", arena_kind="host", layout=Layout().to_json(), args=[{"value": 1}],
                    init_inputs=[], weights={}, outputs=["out0"], model_seed=7, env={"A": "b"})
    assert RunnerJob(**json.loads(json.dumps(job.__dict__))) == job


def test_ablation_empties_launched_kernels_and_keeps_device_helpers():
    source = textwrap.dedent('''
        import torch, triton
        import triton.language as tl

        @triton.jit
        def helper(x):
            return x * 2

        @triton.jit
        def kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, helper(tl.load(x_ptr + offs)))

        class ModelNew(torch.nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                kernel[(1,)](x, y, BLOCK=16)
                return y
    ''')
    ablated = ablate_triton_kernels(source)
    assert ablated_kernel_names(source) == ["kernel"]
    assert "return x * 2" in ablated  # the helper keeps its body
    assert "tl.store" not in ablated and "helper(tl.load" not in ablated
    assert ablate_triton_kernels("class ModelNew: pass\n") is None


def test_the_runners_package_imports_nothing_of_the_judge_the_db_ray_the_llm_client_or_rich():
    """What runs beside a candidate (kgen/harness/) must not drag in kgen's trusted side: a candidate
    that walks sys.modules finds no DB session, Ray handle, API client or judge there: of kgen, only the
    harness and kgen.core (tests/test_layers.py checks the imports in the source)."""
    code = ("import sys, pkgutil, importlib, kgen.harness as h\n"
            "for m in pkgutil.iter_modules(h.__path__):\n"
            "    importlib.import_module('kgen.harness.' + m.name)\n"
            "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('sqlalchemy', 'ray', 'openai', 'rich', "
            "'jinja2', 'alembic', 'typer') or (n.startswith('kgen.') and n.split('.')[1] not in ('harness', 'core')))\n"
            "print(len(list(pkgutil.iter_modules(h.__path__))), bad)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)))
    assert done.returncode == 0, done.stderr[-2000:]
    count, bad = done.stdout.strip().split(" ", 1)
    assert int(count) >= 6 and bad == "[]"


def test_a_yes_of_the_sandbox_probe_is_kept_for_the_next_process_and_asked_again_after_a_chmod(
        monkeypatch, tmp_path):
    """As root, whether bubblewrap may run as nobody is probed once (a sandboxed `import torch`, seconds) and a
    yes kept in kgen's cache: a new process reads it instead of probing; a no is never kept; a chmod of a
    directory the sandbox binds for Python asks again."""
    from kgen.judge import sandbox

    python_dir = tmp_path / "python"
    python_dir.mkdir()
    monkeypatch.setattr(sandbox, "python_paths", lambda: (python_dir,))
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)
    answers = {True: 0, False: 1}  # the probe's exit status with and without the GPU's nodes
    probes = []

    def probe(argv, **kwargs):
        probes.append(argv)
        return subprocess.CompletedProcess(argv, answers[probes_gpu[0]])

    probes_gpu = [True]
    monkeypatch.setattr(sandbox.subprocess, "run", probe)

    def new_process(gpu: bool) -> bool:
        sandbox._probe_as_nobody.cache_clear()
        probes_gpu[0] = gpu
        return sandbox._run_as_nobody(gpu)

    try:
        assert new_process(True) is True and len(probes) == 1
        assert sandbox.probe_record(True).is_file()
        assert new_process(True) is True and len(probes) == 1  # read back, not probed
        assert new_process(False) is False and len(probes) == 2
        assert not sandbox.probe_record(False).is_file()
        assert new_process(False) is False and len(probes) == 3  # a no is asked again
        python_dir.chmod(0o700)  # nobody can no longer read it: the kept yes is not this installation's
        assert not sandbox.probe_record(True).is_file()
        assert new_process(True) is True and len(probes) == 4
    finally:
        sandbox._probe_as_nobody.cache_clear()  # later tests probe this machine for real


@pytest.mark.parametrize("mode", [SandboxMode.BWRAP, SandboxMode.NONE])
def test_the_cpu_compile_stages_sandboxes_run_niced_and_the_runners_do_not(mode, monkeypatch):
    """nvcc builds fill a node's CPUs beside the judge's gate-clock poll: the CPU compile stage's sandboxes
    (kind "compile" on the CPU) run KGEN_COMPILE_NICE lower (default 10), a runner at the judge's own priority;
    0 turns it off. Read from the kernel (getpriority) of the processes actually started."""
    from kgen.judge.spares import start_process

    ours = os.getpriority(os.PRIO_PROCESS, 0)

    def niceness(kind: str) -> int:
        slot = start_process("cpu", mode, kind)
        try:
            return os.getpriority(os.PRIO_PROCESS, slot.process.proc.pid)
        finally:
            slot.close()

    monkeypatch.delenv("KGEN_COMPILE_NICE", raising=False)
    assert niceness("compile") == min(19, ours + 10)
    assert niceness("run") == ours
    monkeypatch.setenv("KGEN_COMPILE_NICE", "0")
    assert niceness("compile") == ours
