"""Which part of the sandbox stops CUDA from starting: runs a one-line CUDA init in bubblewrap
under variants of the sandbox (seccomp filters, uid, device nodes) and prints each one's result."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kgen.harness import seccomp
from kgen.judge.sandbox import SandboxMode, SandboxSpec, bwrap_command, sandbox_env

CODE = "import torch; x = torch.ones(4, device='cuda'); print('ok', float(x.sum()))"


def bpf(without=()):
    f = seccomp._Filter()
    for name in seccomp.ESCAPE_SYSCALLS:
        if name not in without:
            f.deny(name)
    if "clone" not in without:
        for flag in seccomp.NAMESPACE_CLONE_FLAGS:
            f.deny("clone", 1, (0, seccomp.SCMP_CMP_MASKED_EQ, flag, flag))
        f.deny("clone3", 38)
    return f.export_bpf()


def run(label, filt=None, nobody=False, extra=()):
    spec = SandboxSpec(gpu=True)
    fds = []
    fd = None
    if filt is not None:
        fd = os.memfd_create("f")
        os.write(fd, filt)
        os.lseek(fd, 0, 0)
        fds.append(fd)
    cmd = bwrap_command([sys.executable, "-c", CODE], spec, fd, "/tmp")
    if extra:
        i = cmd.index("--chdir")
        cmd[i:i] = list(extra)
    kw = dict(user=65534, group=65534, extra_groups=[]) if nobody else {}
    env = sandbox_env(spec, SandboxMode.BWRAP, "/tmp")
    done = subprocess.run(cmd, capture_output=True, text=True, pass_fds=fds, env=env, timeout=120, **kw)
    last = (done.stdout.strip().splitlines() or [""])[-1] if done.returncode == 0 else \
        (done.stderr.strip().splitlines() or [""])[-1][:200]
    print(f"{label:45s} rc={done.returncode} {last}", flush=True)


run("no seccomp, root-mapped")
run("no seccomp, nobody", nobody=True)
run("escape filter, root-mapped", bpf())
run("escape filter without socket", bpf(("socket", "socketpair")))
run("escape filter without personality", bpf(("personality",)))
run("escape filter without clone rules", bpf(("clone",)))
run("escape filter, nobody, without socket", bpf(("socket", "socketpair")), nobody=True)
run("no seccomp, all of /dev", extra=("--dev-bind", "/dev", "/dev"))
