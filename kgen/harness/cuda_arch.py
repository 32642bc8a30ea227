"""The GPU architecture a candidate's CUDA code is built for: kgen's choice, never the candidate's.

Candidates copy architecture flags from their training data (`-arch=sm_70`, `-gencode arch=...`,
`TORCH_CUDA_ARCH_LIST` set at import); CUDA 13's nvcc refuses sm_70, and any pinned arch other than
the evaluating GPU's builds code that cannot run or runs without that GPU's features. So every such
flag is removed, the rest are kept, and the build targets exactly the evaluating GPU
(`target_arch()`, which the judge sets through KGEN_CUDA_ARCH). From compute capability 9.0 on the
target is the arch-specific variant (sm_90a, sm_100a, sm_120a): it runs only on that exact GPU, which
is the one being evaluated, and it is what wgmma, setmaxnreg and tcgen05 sources need (plain sm_90
refuses wgmma). The rewrite happens before the build key is computed, so the compile step and the
runner derive the same key from the same source.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import Optional

DEFAULT_ARCH = "9.0"  # the GPU kgen's published results target (H100) when no GPU is visible
FIRST_ARCH_SPECIFIC_MAJOR = 9  # sm_90a is the first arch-specific ('a') target

# nvcc's architecture options, short and long: each takes a value, inline (`-arch=sm_70`) or as the
# next token (`-arch sm_70`). `--arch` is not nvcc's spelling but LLMs write it.
ARCH_OPTIONS = ("-arch", "--arch", "--gpu-architecture", "-code", "--gpu-code", "-gencode", "--generate-code")

# What nvcc and ptxas print when a source uses a feature the target does not have.
NEWER_ARCH_PATTERNS = (
    re.compile(r"not supported on \.target '?sm_\w+'?"),
    re.compile(r"requires \.target '?sm_\w+'?( or higher)?"),
    re.compile(r"is not supported for this GPU architecture"),
    re.compile(r"is only supported (?:on|for) (?:arch|target)", re.IGNORECASE),
)
# The first target of the PTX instructions LLM-written kernels reach for beyond sm_80; ptxas names the
# instruction but not the target it needs. Longest prefix first.
INSTRUCTION_TARGETS = (
    ("tcgen05", "sm_100a"), ("wgmma", "sm_90a"), ("setmaxnreg", "sm_90a"),
    ("cp.async.bulk", "sm_90"), ("cp.reduce.async.bulk", "sm_90"), ("mbarrier.expect_tx", "sm_90"),
    ("mbarrier.try_wait", "sm_90"), ("fence.proxy.async", "sm_90"), ("stmatrix", "sm_90"), ("elect", "sm_90"),
    ("multimem", "sm_90"), ("barrier.cluster", "sm_90"), ("mapa", "sm_90"), ("getctarank", "sm_90"),
    ("cp.async", "sm_80"), ("ldmatrix", "sm_75"),
)


def target_arch() -> str:
    """The compute capability builds target: KGEN_CUDA_ARCH, else the visible GPU's, else
    TORCH_CUDA_ARCH_LIST's last entry (read before any candidate is imported), else H100's."""
    import torch

    if os.environ.get("KGEN_CUDA_ARCH"):
        return os.environ["KGEN_CUDA_ARCH"]
    if torch.version.cuda and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{major}.{minor}"
    listed = os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(";", " ").split()
    return listed[-1].replace("+PTX", "") if listed else DEFAULT_ARCH


def sm_name(arch: str) -> str:
    """nvcc's name for a compute capability: "8.0" -> "sm_80", "9.0" -> "sm_90a" (see the module doc)."""
    major, _, minor = arch.removesuffix("a").partition(".")
    suffix = "a" if int(major) >= FIRST_ARCH_SPECIFIC_MAJOR else ""
    return f"sm_{major}{minor or '0'}{suffix}"


def gencode_flags(arch: str) -> list[str]:
    """The only architecture flags a build gets: machine code for the target, no PTX to JIT elsewhere."""
    sm = sm_name(arch)
    return [f"-gencode=arch=compute_{sm.removeprefix('sm_')},code={sm}"]


@dataclass(frozen=True)
class ArchRewrite:
    """A candidate's flags with its architecture flags removed, and what was removed."""

    flags: list[str]
    removed: list[str]


def _arch_option(token: str) -> Optional[str]:
    """The option a token starts, or None; `-arch` and `-arch=...` are options, `-archive` is not."""
    for option in ARCH_OPTIONS:
        if token == option or token.startswith(option + "="):
            return option
    return None


def _tokens(element: str) -> list[str]:
    """One flag list element as shell words: torch joins the list with spaces into a command line,
    so "-O3 -arch=sm_70" is two flags."""
    try:
        return shlex.split(element)
    except ValueError:  # unbalanced quotes: let the compiler report it
        return [element]


def strip_arch_flags(flags: list[str]) -> ArchRewrite:
    """Remove every architecture option and its value; other flags are kept as they were written
    (an element is re-split, and its remaining words re-quoted, only when it held an arch option)."""
    kept: list[str] = []
    removed: list[str] = []
    value_pending = False  # the last removed option takes the next word as its value
    for element in flags:
        words = _tokens(element)
        if not value_pending and not any(_arch_option(w) for w in words):
            kept.append(element)
            continue
        for word in words:
            if value_pending:
                removed[-1] += f" {word}"
                value_pending = False
            elif _arch_option(word):
                removed.append(word)
                value_pending = "=" not in word
            else:
                kept.append(shlex.quote(word))
    return ArchRewrite(kept, removed)


def arch_note(removed: list[str], env_arch_list: Optional[str], arch: str) -> Optional[str]:
    """One line for the evaluation record saying what kgen overrode, or None when nothing was."""
    parts = []
    if removed and removed != gencode_flags(arch):
        parts.append(f"architecture flags {' '.join(removed)} replaced by {sm_name(arch)}")
    if env_arch_list:
        parts.append(f"TORCH_CUDA_ARCH_LIST={env_arch_list} ignored (built for {sm_name(arch)})")
    return "; ".join(parts) or None


def _needed_target(line: str) -> Optional[str]:
    """The target a compiler line says the source needs, where it says (or the instruction tells)."""
    stated = re.search(r"requires \.target '?(sm_\w+?)'?(?: or higher|\b)", line)
    if stated:
        return stated.group(1)
    instruction = re.search(r"Instruction '([\w.]+)'", line)
    if instruction:
        for prefix, target in INSTRUCTION_TARGETS:
            if instruction.group(1).startswith(prefix):
                return target
    return None


def newer_arch_message(compiler_output: str, arch: str) -> Optional[str]:
    """One line when the compiler refused a feature the target architecture lacks, e.g. "the source
    needs sm_90a or newer; the evaluating GPU is sm_80 (Instruction 'wgmma.fence' not supported on
    .target 'sm_80')"; None when the output says nothing of the kind."""
    for line in compiler_output.splitlines():
        if any(pattern.search(line) for pattern in NEWER_ARCH_PATTERNS):
            detail = re.sub(r"^.*?\b(error|fatal)\s*:\s*", "", line.strip())
            detail = re.sub(r"^\S+\(\d+\):\s*", "", detail)  # cuda.cu(12): ...
            needed = _needed_target(line)
            needs = f"needs {needed} or newer" if needed else "needs a newer GPU architecture"
            return f"the source {needs}; the evaluating GPU is {sm_name(arch)} ({detail})"
    return None
