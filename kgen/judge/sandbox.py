"""The sandbox a candidate runs in: bubblewrap (`bwrap`), configured here, started by the judge.

Every process that runs candidate code (the compile step and the runner, kgen.harness) starts as

    bwrap --unshare-all --disable-userns --uid 65534 --gid 65534 --cap-drop ALL --die-with-parent
          --new-session --seccomp FD --ro-bind <system, Python, torch, kgen/> --tmpfs /tmp
          --proc /proc --dev /dev [--dev-bind /dev/nvidia*] ... python -m kgen.harness.X

so it has its own user, PID, network, IPC, UTS and cgroup namespaces (no network at all, no other
process visible, a fresh /proc with no host /proc beneath it), uid 65534 and no capabilities,
`no_new_privs`, the seccomp filter of kgen.harness.seccomp, a read-only view of exactly the system
directories, the Python installation, the packages it imports and kgen's own package (never the
repository around it, the results DB, the user's home or kgen's cache beyond the builds it is
given), a private writable tmpfs as /tmp and $HOME, and of /dev only the standard nodes and the GPU's.
Its environment is built from an allow-list (`sandbox_env`), never copied from ours. Its stdout and
stderr are pipes this process holds and drains into bounded buffers; nothing is re-opened by path.

When kgen runs as root and the Python installation is readable by uid 65534, bubblewrap itself is
started as uid 65534 (so the sandbox is nobody outside its namespace too); otherwise uid 65534 inside
the sandbox maps to kgen's own user outside it, which owns nothing the sandbox can reach.

`--no-sandbox` (SandboxMode.NONE) runs the same processes without bubblewrap, with the same
environment allow-list and pipes: every result it produces records that it was not sandboxed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import signal
import site
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Optional

from kgen.core.errors import KgenError

SANDBOX_UID = 65534
TMPFS_BYTES = 4 << 30
FILE_SIZE_LIMIT_BYTES = 2 << 30  # enough for CUDA builds and Triton caches, not for filling a disk
LOG_HEAD_BYTES = 4_000
LOG_TAIL_BYTES = 16_000
INSTALL_HINT = ("bubblewrap (bwrap) is not installed; kgen runs every candidate inside it: install it "
                "(Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), or pass "
                "--no-sandbox to evaluate without it (every result then records that it was not sandboxed)")
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf",
             "localtime")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
# Variables a sandboxed process may see, copied from ours when set; everything else is dropped.
PASSED_THROUGH = ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "TRITON_PTXAS_PATH",
                  "TRITON_LIBCUDA_PATH", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")


class SandboxMode(str, Enum):
    BWRAP = "bwrap"
    NONE = "none"  # --no-sandbox

    def __str__(self) -> str:
        return self.value


class SandboxUnavailable(RuntimeError):
    """The sandbox could not be set up (a harness fault, never the candidate's)."""


def bwrap_path() -> Optional[str]:
    return shutil.which("bwrap") or next((p for p in ("/usr/bin/bwrap", "/usr/local/bin/bwrap") if os.path.exists(p)),
                                         None)


def check_sandbox(mode: SandboxMode) -> None:
    """Raise a one-line KgenError when `mode` cannot run here (called before any work starts)."""
    if mode is SandboxMode.NONE:
        return
    if bwrap_path() is None:
        raise KgenError(INSTALL_HINT)
    from kgen.harness import seccomp

    if not seccomp.available():
        raise KgenError("libseccomp is not installed; the sandbox needs it for its system-call filter "
                        "(Debian/Ubuntu: apt-get install libseccomp2), or pass --no-sandbox")
    problem = _bwrap_problem()
    if problem:
        raise KgenError(f"bubblewrap cannot create a sandbox here ({problem}); user namespaces may be disabled "
                        "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces), or pass --no-sandbox")


@functools.lru_cache(maxsize=1)
def _bwrap_problem() -> str:
    try:
        done = subprocess.run([bwrap_path(), "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                               "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    return "" if done.returncode == 0 else (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]


def _module_root(name: str) -> Optional[Path]:
    """The sys.path entry a top-level package is imported from (without importing it)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    origin = Path(spec.origin).resolve()
    return origin.parent.parent if origin.name == "__init__.py" else origin.parent


def kgen_package_dir() -> Path:
    from kgen.core.resources import PACKAGE_DIR

    return PACKAGE_DIR


@functools.lru_cache(maxsize=1)
def python_paths() -> tuple[Path, ...]:
    """What Python, torch and triton need, read-only: the interpreter's prefixes and the library
    directories (site-packages), never a sys.path entry that is a project folder or a home."""
    paths = {Path(sys.base_prefix), Path(sys.prefix), Path(sys.exec_prefix), Path(sys.executable).resolve().parent}
    for p in site.getsitepackages():
        paths.add(Path(p))
    for name in ("torch", "triton", "numpy", "typing_extensions", "sympy", "filelock", "jinja2", "networkx",
                 "fsspec", "mpmath", "markupsafe"):
        root = _module_root(name)
        if root is not None:
            paths.add(root)
    kgen_parent = kgen_package_dir().parent
    resolved = sorted({p.resolve() for p in paths if p.exists() and p.resolve() != kgen_parent})
    return tuple(p for p in resolved if not any(p != q and p.is_relative_to(q) for q in resolved))


def gpu_device_nodes() -> list[str]:
    return sorted(str(p) for p in Path("/dev").glob("nvidia*")) + sorted(
        str(p) for p in Path("/dev").glob("nvidia-caps/*"))


def _libcuda_dir() -> Optional[str]:
    """Where libcuda.so.1 lives (Triton asks `ldconfig -p` otherwise, which starts a process)."""
    import ctypes.util

    candidates = [os.environ.get("TRITON_LIBCUDA_PATH")] if os.environ.get("TRITON_LIBCUDA_PATH") else []
    candidates += ["/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/cuda/lib64/stubs"]
    for d in candidates:
        if d and os.path.exists(os.path.join(d, "libcuda.so.1")):
            return d
    found = ctypes.util.find_library("cuda")
    return os.path.dirname(found) if found and os.path.isabs(found) else None


@dataclass
class SandboxSpec:
    """What one sandboxed process may see and do."""

    gpu: bool = False
    read_only: list[Path] = field(default_factory=list)  # beyond system, Python and kgen/
    writable: list[Path] = field(default_factory=list)   # bound read-write at the same path
    env: dict[str, str] = field(default_factory=dict)    # added to the allow-listed environment
    memory_limit_bytes: Optional[int] = None
    nice: int = 0  # added to the process's niceness (kgen.judge.spares: the CPU compile stage's builds)


def sandbox_env(spec: SandboxSpec, mode: SandboxMode, workdir: str) -> dict[str, str]:
    """The environment of a sandboxed process: built here, never copied wholesale from ours."""
    bins = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin",
            str(Path(sys.executable).parent)]
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        bins.insert(0, os.path.join(cuda_home, "bin"))
    home = os.path.join(workdir, "home")
    env = {"PATH": ":".join(dict.fromkeys(bins)), "HOME": home, "TMPDIR": workdir, "USER": "kgen", "LOGNAME": "kgen",
           "LANG": "C.UTF-8", "PYTHONPATH": str(kgen_package_dir().parent), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONNOUSERSITE": "1", "PYTHONUNBUFFERED": "1", "KGEN_SANDBOX": str(mode),
           "TORCH_EXTENSIONS_DIR": os.path.join(home, "torch_extensions"),
           "TRITON_HOME": home}
    for name in PASSED_THROUGH:
        if os.environ.get(name):
            env[name] = os.environ[name]
    if sys.pycache_prefix:  # kgen's kept bytecode (kgen.core.bytecode), read-only here: read, never written
        env["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix
    if spec.gpu:
        libcuda = _libcuda_dir()
        if libcuda and "TRITON_LIBCUDA_PATH" not in env:
            env["TRITON_LIBCUDA_PATH"] = libcuda
    env.update(spec.env)
    return env


def _bind_args(spec: SandboxSpec) -> list[str]:
    args: list[str] = []
    for top in SYSTEM_DIRS:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for name in ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    bound = [Path(d) for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    ro = list(python_paths()) + [kgen_package_dir()] + [Path(p).resolve() for p in spec.read_only]
    if sys.pycache_prefix and os.path.isdir(sys.pycache_prefix):
        ro.append(Path(sys.pycache_prefix).resolve())
    if spec.gpu:
        ro += [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p and os.path.isdir(p)]
        libcuda = _libcuda_dir()
        if libcuda:
            ro.append(Path(libcuda))
    for path in ro:
        if path.exists() and not any(path.is_relative_to(b) for b in bound):
            args += ["--ro-bind", str(path), str(path)]
            bound.append(path)
    for path in spec.writable:
        args += ["--bind", str(Path(path).resolve()), str(Path(path).resolve())]
    if spec.gpu:
        for node in gpu_device_nodes():
            args += ["--dev-bind", node, node]
        args += ["--ro-bind", "/sys", "/sys"]
    return args


def bwrap_command(argv: list[str], spec: SandboxSpec, seccomp_fd: Optional[int], workdir: str) -> list[str]:
    """The full bubblewrap command line that runs `argv` under `spec`."""
    seccomp = ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
    # --as-pid-1: the sandboxed program is PID 1 of its namespace, with no bubblewrap reaper beside it. A
    # reaper runs as the same uid, so the candidate could open /proc/1/mem read-write and run code in a
    # process that never loads the runner's no-new-processes seccomp filter (issue 13, attack
    # c3_ptrace_procmem). As PID 1 it still dies with its parent (--die-with-parent's SIGKILL comes from
    # the parent namespace) and with the namespace.
    return [bwrap_path(), "--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--hostname", "kgen-sandbox", "--cap-drop", "ALL", "--die-with-parent", "--new-session", *seccomp,
            "--size", str(TMPFS_BYTES), "--tmpfs", workdir, "--dir", os.path.join(workdir, "home"),
            "--proc", "/proc", "--dev", "/dev",
            *_bind_args(spec), "--chdir", workdir, "--", *argv]


class BoundedLog:
    """The first and last bytes of a stream, and how many there were: a candidate may print gigabytes."""

    def __init__(self):
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.lock = threading.Lock()

    def feed(self, data: bytes) -> None:
        with self.lock:
            self.total += len(data)
            room = LOG_HEAD_BYTES - len(self.head)
            if room > 0:
                self.head += data[:room]
                data = data[room:]
            self.tail += data
            if len(self.tail) > LOG_TAIL_BYTES:
                del self.tail[:len(self.tail) - LOG_TAIL_BYTES]

    def text(self) -> str:
        with self.lock:
            cut = self.total - len(self.head) - len(self.tail)
            middle = f"\n[... {cut} bytes cut ...]\n" if cut > 0 else ""
            return (bytes(self.head).decode(errors="replace") + middle + bytes(self.tail).decode(errors="replace"))


def _drain(pipe, log: BoundedLog) -> None:
    try:
        while True:
            data = os.read(pipe.fileno(), 1 << 16)
            if not data:
                break
            log.feed(data)
    except OSError:
        pass
    finally:
        pipe.close()


def _reachable_by_nobody(path: Path) -> bool:
    """Whether uid 65534 can reach `path`: every directory above it searchable by others (kgen's
    own cache under a 0700 /root is not), the path itself readable."""
    import stat

    path = Path(path).resolve()
    for parent in reversed(path.parents):
        try:
            if not parent.stat().st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return bool(mode & stat.S_IROTH) or path.stat().st_uid == SANDBOX_UID


def _drop_to_nobody(spec: SandboxSpec) -> bool:
    """Start bubblewrap itself as uid 65534 (kgen runs as root): when Python works for nobody here and
    every path the sandbox binds can be reached by it."""
    return _run_as_nobody(spec.gpu) and all(_reachable_by_nobody(p) for p in [*spec.read_only, *spec.writable])


_PROBING = threading.Lock()  # one probe at a time: a caller that comes while it runs waits for its answer


def probe_early(gpu: bool) -> None:
    """Start the probe of _run_as_nobody now, in a thread: it is a sandboxed `import torch`, once per process,
    and the first sandbox started waited for it (on the H100 boxes an evaluator's prestart took 3.9-4.5 s,
    most of it this probe, before its first sandbox started and its first candidate could begin). An
    evaluator calls this as its process starts, seconds before its first sandboxes (its own imports run
    meanwhile)."""
    if os.geteuid() == 0:
        threading.Thread(target=_run_as_nobody, args=(gpu,), daemon=True, name="kgen-sandbox-probe").start()


def _run_as_nobody(gpu: bool) -> bool:
    with _PROBING:
        return _probe_as_nobody(gpu)


@functools.lru_cache(maxsize=2)
def _probe_as_nobody(gpu: bool) -> bool:
    """Whether bubblewrap can itself run as uid 65534 here (kgen runs as root, and the Python
    installation and packages are readable by nobody): a probe, once per process, and a yes kept in kgen's
    cache (probe_record) for the next process on this installation."""
    if os.geteuid() != 0:
        return False
    record = probe_record(gpu)
    if record is not None and record.is_file():
        return True
    spec = SandboxSpec(gpu=gpu)
    try:
        argv = bwrap_command([sys.executable, "-c", "import torch"], spec, None, "/tmp")
        done = subprocess.run(argv, capture_output=True, timeout=120, user=SANDBOX_UID, group=SANDBOX_UID,
                              extra_groups=[], cwd="/", env=sandbox_env(spec, SandboxMode.BWRAP, "/tmp"))
    except (OSError, subprocess.SubprocessError):
        return False
    if done.returncode == 0 and record is not None:
        with contextlib.suppress(OSError):  # a cache that takes no writes: every process probes, as before
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text("uid 65534 imported torch in the sandbox\n")
    return done.returncode == 0


def probe_record(gpu: bool) -> Optional[Path]:
    """Where a yes of the probe is kept: a file named for what the probe's answer depends on (our uid, the
    interpreter, bubblewrap, the owner and mode of every directory the sandbox binds for Python and kgen and of
    their parents, and of torch's libraries with their change times): a chmod or chown of any of them, torch
    reinstalled or another Python asks again. The sandboxed `import torch` took seconds on the H100 box, and every `kgen
    eval` and every evaluator paid it before its first sandbox could start. Only a yes is kept, so a stale one
    can only make a sandbox fail to start as nobody (a harness_error), never run it as anyone but nobody.
    None where it cannot be worked out."""
    import hashlib

    from kgen.core.resources import cache_dir

    try:
        roots = [*python_paths(), kgen_package_dir()]
        torch_dir = _module_root("torch")
        torch_libs = torch_dir / "torch" / "lib" if torch_dir is not None else None
        if torch_libs is not None:
            roots.append(torch_libs)
        paths = {q for p in roots for q in (p, *p.parents)}
        libs = set(torch_libs.iterdir()) if torch_libs is not None and torch_libs.is_dir() else set()
        facts = [str(os.geteuid()), sys.executable, str(bwrap_path()), str(gpu)]
        for path in sorted(paths | libs):
            st = path.stat()  # a directory's change time moves with every file made in it: torch's libraries' only
            changed = f":{st.st_ctime_ns}" if path in libs else ""
            facts.append(f"{path}:{st.st_uid}:{st.st_gid}:{st.st_mode}{changed}")
    except OSError:
        return None
    key = hashlib.sha256("\n".join(facts).encode()).hexdigest()[:32]
    return cache_dir() / "sandbox-probe" / f"nobody-{key}"


def _limits(memory_limit_bytes: Optional[int], nice: int = 0):
    def apply() -> None:
        if nice > 0:
            os.nice(nice)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT_BYTES, FILE_SIZE_LIMIT_BYTES))
        if memory_limit_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))

    return apply


def cpu_memory_limit_bytes() -> Optional[int]:
    """Address-space cap for CPU evaluations (a CUDA process maps far more than it uses, so none
    there): KGEN_EVAL_MEMORY_GB, else 3/4 of this machine's memory, so a candidate allocating huge
    tensors fails in its own process instead of waking the OOM killer."""
    if os.environ.get("KGEN_EVAL_MEMORY_GB"):
        return int(float(os.environ["KGEN_EVAL_MEMORY_GB"]) * (1 << 30))
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
    return max(total * 3 // 4, 4 << 30)


class SandboxedProcess:
    """One process of the harness (`python -m MODULE`), started in the sandbox with the given end of
    a socketpair as its channel (its descriptor number is its last argument)."""

    def __init__(self, module: str, spec: SandboxSpec, mode: SandboxMode, channel_fd: int,
                 wrapper: tuple[str, ...] = ()):
        import tempfile

        self.mode = mode
        self.runs_as: Optional[int] = None  # the uid bubblewrap itself runs as, when not ours
        self.stdout, self.stderr = BoundedLog(), BoundedLog()
        self._host_workdir: Optional[str] = None
        # `wrapper`: a program that starts the harness as its child inside the same sandbox (Nsight
        # Compute, kgen.judge.ncu_profile), so it sees no more than the harness does
        argv = [*wrapper, sys.executable, "-m", module, str(channel_fd)]
        pass_fds = [channel_fd]
        kwargs = {}
        if mode is SandboxMode.BWRAP:
            from kgen.harness.seccomp import escape_filter_bpf

            workdir = "/tmp"
            seccomp_fd = os.memfd_create("kgen-seccomp")
            os.write(seccomp_fd, escape_filter_bpf())
            os.lseek(seccomp_fd, 0, os.SEEK_SET)
            pass_fds.append(seccomp_fd)
            env = sandbox_env(spec, mode, workdir)
            command = bwrap_command(argv, spec, seccomp_fd, workdir)
            if _drop_to_nobody(spec):
                self.runs_as = SANDBOX_UID
                for path in spec.writable:  # fresh directories of this evaluation: theirs to write
                    self.hand_over(path)
                kwargs = dict(user=SANDBOX_UID, group=SANDBOX_UID, extra_groups=[])
            self.isolation = "bubblewrap: own user/PID/network/IPC namespaces, uid 65534, no capabilities, seccomp"
            cwd = "/"
        else:
            self._host_workdir = tempfile.mkdtemp(prefix="kgen-nosandbox-")
            os.makedirs(os.path.join(self._host_workdir, "home"))
            env = sandbox_env(spec, mode, self._host_workdir)
            command, seccomp_fd, cwd = argv, None, self._host_workdir
            self.isolation = "none (--no-sandbox): a plain process with an allow-listed environment"
        try:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, cwd=cwd, env=env, pass_fds=pass_fds,
                                         start_new_session=True, preexec_fn=_limits(spec.memory_limit_bytes, spec.nice),
                                         **kwargs)
        except OSError as e:
            raise SandboxUnavailable(f"cannot start {module}: {e}") from e
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
        self._readers = [threading.Thread(target=_drain, args=(pipe, log), daemon=True)
                         for pipe, log in ((self.proc.stdout, self.stdout), (self.proc.stderr, self.stderr))]
        for t in self._readers:
            t.start()

    def hand_over(self, path) -> None:
        """Make a directory tree the sandbox's to write: owned by the uid it runs as, when not ours."""
        if self.runs_as is None:
            return
        for root, dirs, files in os.walk(path):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.chown(name, self.runs_as, self.runs_as, follow_symlinks=False)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pause(self, paused: bool) -> None:
        """SIGSTOP (or SIGCONT) it and everything it started: a spare kept waiting must not take CPU or
        GPU time while another candidate is timed."""
        try:
            os.killpg(self.proc.pid, signal.SIGSTOP if paused else signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self) -> None:
        """SIGKILL it and everything it started (bubblewrap takes its PID namespace down with it)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for t in self._readers:
            t.join(timeout=5)
        if self._host_workdir:
            shutil.rmtree(self._host_workdir, ignore_errors=True)

    def exit_description(self) -> str:
        rc = self.proc.poll()
        if rc is None:
            return "was still running"
        if rc < 0 or rc > 128:
            sig = -rc if rc < 0 else rc - 128
            try:
                return f"was killed by signal {signal.Signals(sig).name}"
            except ValueError:
                return f"exited with status {rc}"
        return f"exited with status {rc}"
