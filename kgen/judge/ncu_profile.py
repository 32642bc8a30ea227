"""Hardware-counter profiles of the best candidates (Nsight Compute), for the next round's prompt,
`kgen show` and the report: per kernel its duration, DRAM throughput and compute (SM) throughput as
% of peak, DRAM bytes moved, achieved and theoretical occupancy (and what limits it), registers per
thread, local-memory (spill) instructions, and the top warp stall reasons.

How it runs, and what it is not:
- After each round the search asks one GPU evaluator to profile, of the candidates without a profile
  yet, first the parents the next prompt will show (where a profile is read), then the round's best
  new correct candidates and the parent each was derived from, within a per-round time budget
  (`--ncu-budget`) and at most 15% of the search's time so far (the evaluator waits meanwhile; a
  profile takes 12-17 s on the H100, most of it ncu starting the sandboxed runner under injection).
  Each profile is one sandboxed runner, exactly as the judge starts it (bubblewrap, uid 65534, no
  network, kgen's builds read-only), with `ncu` as the runner's parent
  *inside* the same sandbox: Nsight Compute sees what the candidate sees and nothing more. The runner
  loads the candidate from the builds its evaluation compiled, calls forward once (so nothing
  compiles inside the profiled window) and then once more between cudaProfilerStart/Stop, which is
  what `ncu --profile-from-start off` profiles. ncu replays each kernel for its counters; clocks are
  left alone (`--clock-control none`, as the timing runs see them).
- The runner is not sealed for this (ncu's injected library starts threads), so the profile is
  *advice* for the proposer, never evidence for a verdict: the candidate shares a process with the
  injection and could shape what ncu reports. Everything ncu wrote is parsed here as untrusted text:
  numbers checked and clipped, names cut, at most MAX_KERNELS kernels.
- Without `ncu` (set KGEN_NCU to its path if it is not found), with GPU counters not permitted
  (ERR_NVGPUCTRPERM), or on a CPU, the search says once that stall profiles are off and goes on.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import io
import math
import os
import secrets
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

from kgen.core.records import EvalSettings

MAX_KERNELS = 8
MAX_LOG_BYTES = 4 << 20
LAUNCH_COUNT = 40  # kernels ncu profiles per forward, at most: a forward of thousands of launches stays bounded
METRICS = (
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__registers_per_thread",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    "launch__shared_mem_per_block",
    "launch__grid_size",
    "launch__block_size",
    "smsp__sass_inst_executed_op_local_ld.sum",
    "smsp__sass_inst_executed_op_local_st.sum",
    r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio",
)
STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
# What each stall reason means, in the words a kernel writer acts on (Nsight Compute's Warp State section).
STALL_MEANING = {
    "long_scoreboard": "waiting on global/local memory",
    "short_scoreboard": "waiting on shared memory or special math (exp, rsqrt)",
    "barrier": "waiting at a block barrier",
    "lg_throttle": "global memory instruction queue full",
    "mio_throttle": "shared memory / special math queue full",
    "math_pipe_throttle": "math pipe busy",
    "wait": "fixed-latency dependency",
    "drain": "stores draining at exit",
    "not_selected": "ready, another warp issued",
    "no_instruction": "instruction fetch",
    "branch_resolving": "branch resolution",
    "dispatch_stall": "dispatch",
    "imc_miss": "constant cache miss",
    "membar": "memory barrier",
    "sleeping": "sleeping",
    "tex_throttle": "texture queue full",
    "gmma": "waiting on warpgroup MMA (tensor cores)",
    "misc": "other",
}
OCCUPANCY_LIMITS = {"launch__occupancy_limit_registers": "registers",
                    "launch__occupancy_limit_shared_mem": "shared memory",
                    "launch__occupancy_limit_warps": "threads per block",
                    "launch__occupancy_limit_blocks": "blocks per SM"}
SOURCE = ("Nsight Compute (hardware counters, one forward, for the best new candidates of each round; "
          "stalls = warp cycles per issued instruction)")


def find_ncu() -> Optional[Path]:
    """The Nsight Compute executable itself (not CUDA's bin/ncu wrapper script, which looks for the
    installation by path and would not find it inside the sandbox): KGEN_NCU, else the newest under
    /opt/nvidia/nsight-compute or the CUDA toolkit, else `ncu` on PATH when it is the real one."""
    named = os.environ.get("KGEN_NCU")
    if named:
        return Path(named).resolve() if os.access(named, os.X_OK) else None
    cuda = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    found = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu") + glob.glob(f"{cuda}/nsight-compute*/ncu"))
    if found:
        return Path(found[-1]).resolve()
    on_path = shutil.which("ncu")
    if on_path and (Path(on_path).resolve().parent / "sections").is_dir():
        return Path(on_path).resolve()
    return None


def ncu_argv(ncu: Path, log: Path) -> list[str]:
    return [str(ncu), "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
            "--launch-count", str(LAUNCH_COUNT), "--csv", "--page", "raw", "--log-file", str(log),
            "--metrics", ",".join(METRICS)]


def _number(text: Any) -> Optional[float]:
    if not isinstance(text, str):
        return None
    try:
        value = float(text.replace(",", "").strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and abs(value) < 1e15 else None


def _ncu_error(text: str) -> Optional[str]:
    """ncu's own complaint, when it profiled nothing (ERR_NVGPUCTRPERM, no kernels, a failed target)."""
    for line in text.splitlines():
        if line.startswith("==ERROR==") and "returned an error code" not in line:
            return line.removeprefix("==ERROR==").strip()[:300]
    if "ERR_NVGPUCTRPERM" in text:
        return "ERR_NVGPUCTRPERM: this user may not read the GPU's performance counters"
    return None


def parse(text: str) -> dict[str, Any]:
    """ncu's `--csv --page raw` log → {"kernels": [...]} (merged by kernel name, longest first), or
    {"error": why}. The text came from the candidate's sandbox: every field is checked here."""
    text = text[:MAX_LOG_BYTES]
    start = text.find('"ID","')
    if start < 0:
        return {"error": _ncu_error(text) or "Nsight Compute profiled no kernel"}
    rows = list(csv.reader(io.StringIO(text[start:])))
    if len(rows) < 3:
        return {"error": _ncu_error(text) or "Nsight Compute profiled no kernel"}
    header = rows[0]
    merged: dict[str, dict[str, Any]] = {}
    for row in rows[2:2000]:  # rows[1] holds the units
        if len(row) != len(header):
            continue
        raw = dict(zip(header, row))
        name = (raw.get("Kernel Name") or "?").strip()[:200]
        ns = _number(raw.get("gpu__time_duration.sum"))
        if ns is None:
            continue
        stalls = {}
        for key, value in raw.items():
            if key.startswith(STALL_PREFIX) and key.endswith(STALL_SUFFIX):
                reason = key[len(STALL_PREFIX):-len(STALL_SUFFIX)][:40]
                v = _number(value)
                if v is not None and reason != "selected":
                    stalls[reason] = round(v, 3)
        limits = {label: _number(raw.get(metric)) for metric, label in OCCUPANCY_LIMITS.items()}
        limits = {k: v for k, v in limits.items() if v is not None}
        read, written = _number(raw.get("dram__bytes_read.sum")), _number(raw.get("dram__bytes_write.sum"))
        kernel = {
            "name": name, "us": round(ns / 1e3, 3), "launches": 1,
            "dram_pct": _number(raw.get("dram__throughput.avg.pct_of_peak_sustained_elapsed")),
            "sm_pct": _number(raw.get("sm__throughput.avg.pct_of_peak_sustained_elapsed")),
            "dram_bytes": None if read is None and written is None else (read or 0) + (written or 0),
            "occupancy_pct": _number(raw.get("sm__warps_active.avg.pct_of_peak_sustained_active")),
            "theoretical_occupancy_pct": _number(raw.get("sm__maximum_warps_per_active_cycle_pct")),
            "occupancy_limit": min(limits, key=limits.get) if limits else None,
            "registers": _number(raw.get("launch__registers_per_thread")),
            "shared_bytes": _number(raw.get("launch__shared_mem_per_block")),
            "grid": _number(raw.get("launch__grid_size")), "block": _number(raw.get("launch__block_size")),
            "local_loads": _number(raw.get("smsp__sass_inst_executed_op_local_ld.sum")),
            "local_stores": _number(raw.get("smsp__sass_inst_executed_op_local_st.sum")),
            "stalls": sorted(stalls.items(), key=lambda kv: -kv[1])[:5],
        }
        seen = merged.get(name)
        if seen is None:
            merged[name] = kernel
        else:  # another launch of the same kernel: counts add up, the longest launch's counters are kept
            total, launches = seen["us"] + kernel["us"], seen["launches"] + 1
            if kernel["us"] > seen["us"]:
                seen.update(kernel)
            seen["us"], seen["launches"] = round(total, 3), launches
    if not merged:
        return {"error": _ncu_error(text) or "Nsight Compute profiled no kernel"}
    kernels = sorted(merged.values(), key=lambda k: -k["us"])[:MAX_KERNELS]
    total_us = sum(k["us"] for k in merged.values())
    for k in kernels:
        k["share_pct"] = round(100 * k["us"] / total_us, 1) if total_us > 0 else None
    return {"kernels": kernels}


def _kernel_text(k: dict[str, Any], min_bytes: Optional[float] = None) -> str:
    name = k["name"] if len(k["name"]) <= 48 else k["name"][:45] + "..."
    parts = [f"{k['us']:.1f} us" + (f" in {k['launches']} launches" if k.get("launches", 1) > 1 else "")]
    if k.get("dram_pct") is not None:
        parts.append(f"DRAM {k['dram_pct']:.0f}% of peak")
    if k.get("sm_pct") is not None:
        parts.append(f"SM {k['sm_pct']:.0f}% of peak")
    if k.get("dram_bytes"):
        ratio = f" = {k['dram_bytes'] / min_bytes:.2f}x the problem's minimum" if min_bytes else ""
        parts.append(f"{k['dram_bytes'] / 1e6:.0f} MB to/from DRAM{ratio}")
    if k.get("occupancy_pct") is not None:
        theory = k.get("theoretical_occupancy_pct")
        limit = (f", limited by {k['occupancy_limit']}" if k.get("occupancy_limit") and theory is not None
                 and theory < 99.5 else "")  # at 100% possible nothing limits it
        parts.append(f"occupancy {k['occupancy_pct']:.0f}%"
                     + (f" of {theory:.0f}% possible{limit}" if theory is not None else ""))
    if k.get("registers") is not None:
        parts.append(f"{k['registers']:.0f} registers/thread")
    spills = (k.get("local_loads") or 0) + (k.get("local_stores") or 0)
    parts.append(f"{spills:.0f} local-memory (spill) instructions" if spills else "no spills")
    stalls = [(reason, v) for reason, v in k.get("stalls") or [] if v >= 0.05][:3]
    if stalls:
        parts.append("top stalls " + ", ".join(f"{r} {v:.1f} ({STALL_MEANING.get(r, r)})" for r, v in stalls))
    return f"{name} ({'; '.join(parts)})"


def summary(profile: Optional[dict[str, Any]]) -> Optional[str]:
    """One readable line for the LLM and `kgen show`; None without a profile (an error reads as such)."""
    if not isinstance(profile, dict):
        return None
    if profile.get("error"):
        return f"Nsight Compute: not available ({profile['error']})"
    kernels = [k for k in profile.get("kernels") or [] if isinstance(k, dict) and k.get("us") is not None]
    if not kernels:
        return None
    shown = kernels[:2]
    min_bytes = _number(str(profile.get("min_bytes"))) if len(kernels) == 1 else None  # one kernel did all the work
    return ("Nsight Compute: " + "; ".join(_kernel_text(k, min_bytes if min_bytes and min_bytes > 0 else None)
                                           for k in shown)
            + (f"; {len(kernels) - len(shown)} more kernel(s)" if len(kernels) > len(shown) else ""))


class NcuUnavailable(Exception):
    """Nsight Compute cannot profile here at all (not installed, not permitted): off for the run."""


def profile_candidate(problem, source: str, settings: EvalSettings, budget_s: float) -> dict[str, Any]:
    """Profile `source` (already evaluated correct here, so its builds exist) under Nsight Compute in
    the sandbox; the parsed profile, or {"error": why}. Raises NcuUnavailable when no candidate could
    ever be profiled here."""
    from kgen.judge.builds import builds_root
    from kgen.judge.evaluate import detect_language, sandbox_mode
    from kgen.judge.judge import Judge
    from kgen.judge.spares import start_process
    from kgen.judge.verdict import HarnessFault, Verdict

    if settings.device == "cpu":
        raise NcuUnavailable("no GPU here")
    ncu = find_ncu()
    if ncu is None:
        raise NcuUnavailable("Nsight Compute (ncu) was not found; set KGEN_NCU to its path")
    started = time.monotonic()
    settings = EvalSettings(**dict(asdict(settings), timeout_s=budget_s))
    judge = Judge(problem, source, detect_language(source), settings, sandbox_mode(settings))
    logdir = builds_root() / f".ncu-{secrets.token_hex(8)}"
    logdir.mkdir(parents=True)
    log = logdir / "ncu.csv"
    phases: dict[str, float] = {}
    mark = [time.monotonic()]

    def phase(name: str) -> None:  # where a profile's seconds go (kept with it)
        now = time.monotonic()
        phases[name] = round(now - mark[0], 2)
        mark[0] = now

    try:
        trials = judge.make_trials()
        trial = judge.make(trials[0])
        judge.reference_profile(trial.inputs)
        job = judge.make_arena(trial.inputs)
        judge.write_inputs(trial.inputs)
        judge.compile_step(job, None)  # cached: the candidate's evaluation compiled this source
        job.seal = False  # Nsight Compute's injected library starts threads in the process it profiles
        slot = start_process(str(judge.device), judge.mode, "run", wrapper=tuple(ncu_argv(ncu, log)),
                             read_only=(ncu.parent,), writable=(logdir,))
        judge.slots.append(slot)
        phase("setup_s")
        judge.started(slot, "the profiler's start")
        slot.channel.send(asdict(job), fds=(judge.arena.fd,))
        judge.receive(slot, "the profiler's setup", ("sealed",))
        phase("start_s")
        slot.channel.send({"type": "load", "module": "candidate", "source": source})
        judge.receive(slot, "the profiler's import", ("loaded",))
        judge.call(slot, trial, "candidate", "the profiler's warm-up call")
        phase("load_s")
        slot.channel.send({"type": "window"})
        judge.receive(slot, "the profiled forward", ("windowed",))
        phase("replay_s")
        slot.channel.send({"type": "bye"})
        judge.receive(slot, "the profiler's end", ("bye",))
        with contextlib.suppress(Exception):  # ncu writes its log as the runner exits; an unfinished one is parsed
            slot.process.proc.wait(timeout=max(judge.left_s(), 5.0))  # as far as it goes
        phase("exit_s")
        with open(log, "rb") as f:
            text = f.read(MAX_LOG_BYTES).decode(errors="replace")
        profile = parse(text)
    except (Verdict, HarnessFault) as e:
        message = getattr(e, "message", None) or str(e)
        profile = {"error": " ".join(message.split())[:300]}
    except OSError as e:
        profile = {"error": f"no Nsight Compute log ({e.strerror or e})"}
    finally:
        judge.close()
        shutil.rmtree(logdir, ignore_errors=True)
    if "ERR_NVGPUCTRPERM" in str(profile.get("error", "")):
        raise NcuUnavailable(profile["error"])
    profile["s"] = round(time.monotonic() - started, 2)
    profile["phases"] = phases
    profile["source"] = SOURCE
    return profile
