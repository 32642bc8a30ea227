"""Seccomp filters for the sandbox, compiled by libseccomp (the library flatpak and bubblewrap use).

Two filters, both enforced by the kernel and impossible to remove once loaded:
- `escape_filter_bpf()`: what every sandboxed process (compile step and runner) may never do. It is
  handed to bubblewrap (`--seccomp FD`), which loads it just before it starts Python: no mount,
  namespace, ptrace, bpf, kernel-keyring, module, clock or io_uring calls, no new sockets (the
  process keeps only the channel it was given), no clone into new namespaces; 32-bit system calls
  kill the process (libseccomp's default for a foreign architecture).
- `load_no_new_processes(block_threads)`: loaded by the runner on itself after torch, CUDA and
  triton are up and before the candidate is imported: no fork, vfork, exec or clone of a process
  from then on, and optionally no new threads either. Compilers (ptxas, nvcc, ninja) therefore run
  only in the compile step; the runner loads their output from the cache.

libseccomp is reached through ctypes; `available()` says whether it is installed (Debian/Ubuntu
`libseccomp2`, Fedora `libseccomp`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import tempfile
from typing import Optional

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_NE = 1
SCMP_CMP_MASKED_EQ = 7
AF_UNIX = 1

CLONE_THREAD = 0x00010000
NAMESPACE_CLONE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
#                       NEWNS       NEWCGROUP   NEWUTS      NEWIPC      NEWUSER     NEWPID      NEWNET

ESCAPE_SYSCALLS = (
    "mount", "umount", "umount2", "pivot_root", "chroot", "setns", "unshare", "ptrace", "process_vm_readv",
    "process_vm_writev", "bpf", "keyctl", "add_key", "request_key", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "open_by_handle_at", "name_to_handle_at", "userfaultfd", "swapon", "swapoff",
    "reboot", "syslog", "acct", "quotactl", "sethostname", "setdomainname", "clock_settime", "clock_adjtime",
    "settimeofday", "adjtimex", "iopl", "ioperm", "fanotify_init", "vhangup", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "personality", "kcmp", "lookup_dcookie", "nfsservctl", "pidfd_getfd",
)
PROCESS_SYSCALLS = ("fork", "vfork", "execve", "execveat")


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


_lib: Optional[ctypes.CDLL] = None


def _libseccomp() -> Optional[ctypes.CDLL]:
    global _lib
    if _lib is None:
        name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError:
            return None
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_release.argtypes = [ctypes.c_void_p]
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                               ctypes.POINTER(_ArgCmp)]
        lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.seccomp_load.argtypes = [ctypes.c_void_p]
        _lib = lib
    return _lib


def available() -> bool:
    return _libseccomp() is not None


class SeccompError(RuntimeError):
    pass


class _Filter:
    """A libseccomp context that allows everything but the rules added."""

    def __init__(self):
        self.lib = _libseccomp()
        if self.lib is None:
            raise SeccompError("libseccomp is not installed (Debian/Ubuntu: apt-get install libseccomp2)")
        self.ctx = self.lib.seccomp_init(SCMP_ACT_ALLOW)
        if not self.ctx:
            raise SeccompError("seccomp_init failed")

    def deny(self, name: str, code: int = errno.EPERM, *conditions: tuple[int, int, int, int]) -> None:
        """Refuse `name` with errno `code` when every condition (arg, op, a, b) holds (none: always)."""
        number = self.lib.seccomp_syscall_resolve_name(name.encode())
        if number < 0:  # not a system call on this architecture (e.g. umount on x86_64 is umount2)
            return
        args = (_ArgCmp * len(conditions))(*[_ArgCmp(*c) for c in conditions]) if conditions else None
        rc = self.lib.seccomp_rule_add_array(self.ctx, _errno_action(code), number, len(conditions), args)
        if rc < 0:
            raise SeccompError(f"seccomp_rule_add({name}) failed: {os.strerror(-rc)}")

    def export_bpf(self) -> bytes:
        with tempfile.TemporaryFile() as f:
            rc = self.lib.seccomp_export_bpf(self.ctx, f.fileno())
            if rc < 0:
                raise SeccompError(f"seccomp_export_bpf failed: {os.strerror(-rc)}")
            f.seek(0)
            return f.read()

    def load(self) -> None:
        rc = self.lib.seccomp_load(self.ctx)
        if rc < 0:
            raise SeccompError(f"seccomp_load failed: {os.strerror(-rc)}")

    def __del__(self):
        if getattr(self, "ctx", None) and self.lib is not None:
            self.lib.seccomp_release(self.ctx)


def escape_filter_bpf() -> bytes:
    """The compiled filter bubblewrap loads for every sandboxed process (see the module docstring)."""
    f = _Filter()
    for name in ESCAPE_SYSCALLS:
        f.deny(name)
    for name in ("socket", "socketpair"):  # arg 0 is the address family
        f.deny(name, errno.EPERM, (0, SCMP_CMP_NE, AF_UNIX, 0))
    for flag in NAMESPACE_CLONE_FLAGS:  # clone(2) into a new namespace; arg 0 of clone is its flags
        f.deny("clone", errno.EPERM, (0, SCMP_CMP_MASKED_EQ, flag, flag))
    f.deny("clone3", errno.ENOSYS)  # its flags sit behind a pointer seccomp cannot read: libc falls back to clone
    return f.export_bpf()


def load_no_new_processes(block_threads: bool = False) -> None:
    """From now on this process can start no process (and, with `block_threads`, no thread)."""
    f = _Filter()
    for name in PROCESS_SYSCALLS:
        f.deny(name)
    f.deny("clone", errno.EPERM, (0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0))  # not a thread: a new process
    if block_threads:
        f.deny("clone", errno.EAGAIN, (0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD))
    f.deny("clone3", errno.ENOSYS)
    f.load()
