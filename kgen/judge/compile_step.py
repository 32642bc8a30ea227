"""The judge's builds: the compile step, the one sandboxed process that may start compilers (ptxas, nvcc). It
imports and calls the candidate (and its ablated copy) once, so Triton compiles their kernels and
load_inline builds their extensions, and publishes them to the source's build directory (kgen.judge.builds),
which the runner then loads read-only; and the CPU compile stage of a CUDA source (`prebuild`), before any GPU.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import torch

from kgen.core.records import NOT_RUN, Outcome
from kgen.harness.protocol import RunnerJob
from kgen.judge.builds import PREBUILT_SUFFIX, build_key, builds_root
from kgen.judge.spares import RunnerSlot
from kgen.judge.verdict import Verdict, _Restart, seconds_in
from kgen.problems.problem import on_device

# The CPU compile stage's own time limit for a CUDA source's builds (a torch/extension.h build takes 60-100 s of
# one core alone, twice that with a build on every core; the H100 collection's were cut at its 120 s limit)
COMPILE_STAGE_S = 600.0


class CompileSteps:
    """The Judge's builds: a part of kgen.judge.judge.Judge, which mixes it in (it uses the Judge's state and
    its make_arena, take, started, receive and close)."""

    def build_env(self) -> dict[str, str]:
        from kgen.harness.cuda_build import pch_env, trim_env

        env = pch_env() | trim_env()
        if self.settings.cuda_arch:
            env["KGEN_CUDA_ARCH"] = env["TORCH_CUDA_ARCH_LIST"] = self.settings.cuda_arch
        return env

    def prepare_pch(self) -> None:
        """kgen's precompiled torch/extension.h for this CUDA source's flags, made here (trusted code),
        before its compile step; its seconds are not charged to the candidate."""
        if self.language == "cuda":
            from kgen.harness.cuda_build import prepare_torch_pch

            with self.judge_work("kgen's precompiled header"):
                self.evidence.details["torch_pch"] = prepare_torch_pch(self.source)

    def build_dir(self) -> Path:
        # a CUDA source's builds depend on the target arch even where nothing runs (nvcc checks it for one)
        arch = self.settings.cuda_arch if self.gpu or torch.version.cuda or self.language == "cuda" else None
        return builds_root() / build_key(self.source, arch, self.input_signature)

    def compile_step(self, job: RunnerJob, ablated: Optional[str]) -> Path:
        """The sandboxed process that may start compilers: it imports and calls the candidate (and its
        ablated copy) once, so Triton compiles their kernels and load_inline builds their extensions,
        and publishes them to the source's build directory. Cached: a source compiled once for this
        GPU and these versions is never compiled again. `job` (the runner's) is pointed at the builds."""
        final = self.build_dir()
        self.evidence.details["build_key"] = final.name  # where its kernels are: builds_root() / build_key
        if (final / "complete").exists():
            self.evidence.details["compile_step"] = "cached"
            return self._use_builds(job, final)
        self.prepare_pch()
        prebuilt = final.with_name(final.name + PREBUILT_SUFFIX) / "cuda"
        while True:
            slot = self.take(str(self.device), "compile")
            staging = slot.staging
            if prebuilt.is_dir():  # the CPU compile stage built its CUDA extensions already
                shutil.copytree(prebuilt, staging / "cuda", symlinks=True, dirs_exist_ok=True)
                slot.process.hand_over(staging / "cuda")
            try:
                self._compile_in(slot, job, ablated)
                break
            except _Restart:  # the ablated copy took the process down: the candidate compiles in a fresh one
                ablated = None
                self.ablated_crashed = True
        (staging / "complete").write_text("compiled by the compile step\n")
        try:
            os.rename(staging, final)
        except OSError:  # another evaluation of the same source published first: use theirs
            shutil.rmtree(staging, ignore_errors=True)
        self.evidence.details["compile_step"] = "compiled"
        return self._use_builds(job, final)

    @staticmethod
    def _use_builds(job: RunnerJob, build: Path) -> Path:
        """Point the runner's job at a finished build directory: its Triton cache, its CUDA builds."""
        job.triton_caches = [str(build / "triton")]
        job.env = dict(job.env, KGEN_CUDA_BUILD_DIR=str(build / "cuda"))
        return build

    def prebuild(self) -> tuple[str, str, list]:
        """The CPU compile stage of a CUDA source (no GPU): the compile step imports it, so its
        load_inline calls build, into the source's `.cuda-prebuilt` directory. Returns (outcome,
        message, builds), outcome "" when it built (or could not tell: the GPU's compile step will)."""
        # a build here is held to COMPILE_STAGE_S, not the candidate's time limit: nvcc slowed by a busy machine
        # (a collection's hundreds of builds at once) would otherwise be given up and redone by the GPU's compile
        # step, on the evaluator, while its GPU waits
        self.deadline = time.monotonic() + max(self.settings.timeout_s, COMPILE_STAGE_S)
        self.model_seed = secrets.randbelow(2**31 - 1000)
        self.reference = self.problem.make_model(self.model_seed, "cpu")
        with on_device("meta"):  # shapes only: the arena's input pages are never written, so never allocated
            inputs = list(self.problem.module.get_inputs())
        job = self.make_arena(inputs, outputs=False)
        final = self.build_dir()
        prebuilt = final.with_name(final.name + PREBUILT_SUFFIX)
        if prebuilt.exists() or (final / "complete").exists():
            return "", "", []
        self.prepare_pch()
        slot = self.take("cpu", "compile")
        staging = slot.staging
        compile_job = RunnerJob(**dict(asdict(job), mode="compile",
                                       env=dict(job.env, KGEN_CUDA_BUILD_DIR=str(staging / "cuda"))))
        outcome, message, builds = "", "", []
        try:
            self.started(slot, "the compile stage's start")
            slot.channel.send(asdict(compile_job), fds=(self.arena.fd,))
            self.receive(slot, "the compile stage's setup", ("sealed",))
            slot.channel.send({"type": "load", "module": "candidate", "source": self.source})
            loaded = self.receive(slot, "the compile stage", ("loaded",))
            builds = loaded.get("builds") if isinstance(loaded.get("builds"), list) else []
            slot.channel.send({"type": "forward", "module": "candidate", "meta": True, "stage": "the compile stage"})
            try:  # a forward on meta tensors, for the extensions it builds on its first call
                self.receive(slot, "the compile stage", ("output",))
            except Verdict as v:
                if v.outcome == Outcome.COMPILE_ERROR:
                    raise
            builds = self.evidence.details.get("cuda_builds", builds)
        except Verdict as v:
            if v.outcome == Outcome.COMPILE_ERROR:
                outcome, message = v.outcome, v.message
            builds = self.evidence.details.get("cuda_builds", [])
        finally:
            slot.close(keep_staging=True)
            self.slots.remove(slot)
            self.close()
        if not outcome:
            with contextlib.suppress(OSError):  # another evaluation of the same source published first
                os.rename(staging, prebuilt)
        shutil.rmtree(staging, ignore_errors=True)
        return outcome, message, builds

    def _compile_in(self, slot: RunnerSlot, job: RunnerJob, ablated: Optional[str]) -> None:
        staging = slot.staging
        compile_job = RunnerJob(**dict(asdict(job), mode="compile", publish_to=str(staging / "triton"),
                                       env=dict(job.env, KGEN_CUDA_BUILD_DIR=str(staging / "cuda"))))
        try:
            self.started(slot, "the compile step's start")
            slot.channel.send(asdict(compile_job), fds=(self.arena.fd,))
            sealed = self.receive(slot, "the compile step's setup", ("sealed",))
            self.evidence.details["compile_setup"] = seconds_in(sealed, "setup_s", 16, 4)
            for module, source in (("ablated", ablated), ("candidate", self.source)):
                if source is None:
                    continue
                slot.channel.send({"type": "load", "module": module, "source": source})
                try:
                    self.receive(slot, f"the compile step ({module})", ("loaded",))
                    slot.channel.send({"type": "forward", "module": module, "stage": "the compile step's warm-up call"})
                    self.receive(slot, f"the compile step ({module})", ("output",))
                except Verdict as v:
                    if module == "candidate" and (v.outcome in (Outcome.COMPILE_ERROR, Outcome.TIMEOUT, NOT_RUN)
                                                  or not slot.process.alive()):
                        raise
                    if not slot.process.alive():  # nothing more can be sent to a dead process
                        raise _Restart() from None
                    # other failures of the warm-up call show again, with their context, in the runner
            slot.channel.send({"type": "bye"})
            self.receive(slot, "the compile step's end", ("bye",))
        except BaseException:
            slot.close()
            self.slots.remove(slot)
            raise
        slot.close(keep_staging=True)
        self.slots.remove(slot)
