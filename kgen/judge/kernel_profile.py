"""What a correct candidate's kernels did on the GPU, for the next round's prompt, `kgen show` and
the report: per kernel its share of the GPU time, launch configuration (grid, block, registers per
thread, shared memory, the occupancy CUPTI estimates), Triton's register and spill counts, and the
whole forward's achieved bandwidth and FLOP rate against the device's measured ceilings.

Where the figures come from, and what they are not:
- The judge profiles one forward of every candidate that passed verification (CUPTI through
  torch.profiler, in the candidate's sandboxed runner — the same profile the kernel audit reads), so
  a profile costs one extra forward plus the trace, not a second process.
- Achieved bandwidth and FLOP rate are computed at the problem's minimum traffic (every input read
  once, every output written once; its FLOPs), divided by the timed median: a kernel that reads x
  twice moves more than that, so the real DRAM traffic is at least this.
- Stall reasons, measured DRAM throughput and achieved occupancy need hardware counters: Nsight
  Compute profiles the best new candidates of each round in a sandbox of its own (kgen.judge.ncu_profile),
  and kgen.store.history.profile_summaries adds its line where a candidate has one.

Everything the runner sent is untrusted (the candidate ran in that process): every field is
type-checked and clipped here before it is stored or shown to an LLM.
"""

from __future__ import annotations

import math
from typing import Any, Optional

STALLS_NOTE = ("the lines marked Nsight Compute come from hardware counters (the best new candidates of each "
               "round, where ncu can run): measured DRAM traffic, achieved occupancy, spills and the top warp stall "
               "reasons in warp cycles per issued instruction")
SOURCE = "CUPTI via torch.profiler (one forward, after verification)"
MAX_KERNELS = 8


def _num(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _dims(value: Any) -> Optional[list[int]]:
    if isinstance(value, (list, tuple)) and 1 <= len(value) <= 3 and all(_num(v) is not None for v in value):
        return [int(v) for v in value]
    return None


def _text(value: Any, limit: int = 120) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in str(value))[:limit]


def from_runner(report: dict[str, Any], own_names: set[str]) -> Optional[dict[str, Any]]:
    """The stored profile, from the runner's `profile` reply (launches from the Kineto trace, Triton's
    compiled-kernel statistics). None when the runner sent no launch data."""
    launches = report.get("launches")
    if not isinstance(launches, list) or not launches:
        return None
    rows = []
    for k in launches[:20]:
        if not isinstance(k, dict):
            continue
        name = _text(k.get("name"), 300)
        us = _num(k.get("us")) or 0.0
        rows.append({
            "name": name, "us": round(us, 2), "launches": int(_num(k.get("launches")) or 0),
            "whose": "own" if any(n and n in name for n in own_names) else "other",
            "grid": _dims(k.get("grid")), "block": _dims(k.get("block")),
            "registers": _num(k.get("registers")), "shared_bytes": _num(k.get("shared_bytes")),
            "occupancy_pct": _num(k.get("occupancy_pct")),
        })
    total = sum(r["us"] for r in rows)
    for r in rows:
        r["share_pct"] = round(100.0 * r["us"] / total, 1) if total > 0 else None
    triton = []
    for t in (report.get("triton") or [])[:20] if isinstance(report.get("triton"), list) else []:
        if isinstance(t, dict):
            triton.append({"kernel": _text(t.get("kernel"), 100),
                           **{key: _num(t.get(key)) for key in ("n_regs", "n_spills", "shared_bytes", "num_warps",
                                                                 "num_stages")}})
    return {"source": SOURCE, "gpu_us": round(total, 2), "kernels": rows[:MAX_KERNELS], "triton": triton,
            "stalls": None, "stalls_note": STALLS_NOTE}


def add_achieved(profile: Optional[dict[str, Any]], bytes_moved: int, flops: int, runtime_ms: Optional[float],
                 bandwidth_bytes_per_s: Optional[float], compute_flops_per_s: Optional[float]) -> None:
    """Achieved bandwidth and FLOP rate of the timed median at minimum traffic, as % of the ceilings."""
    if profile is None or not runtime_ms or runtime_ms <= 0:
        return
    seconds = runtime_ms / 1e3
    achieved: dict[str, Any] = {"basis": "minimum traffic (each input read once, each output written once)"}
    achieved["bandwidth_gb_s"] = round(bytes_moved / seconds / 1e9, 1)
    if bandwidth_bytes_per_s:
        achieved["bandwidth_pct"] = round(100.0 * bytes_moved / seconds / bandwidth_bytes_per_s, 1)
    achieved["tflop_s"] = round(flops / seconds / 1e12, 2)
    if compute_flops_per_s:
        achieved["compute_pct"] = round(100.0 * flops / seconds / compute_flops_per_s, 1)
    profile["achieved"] = achieved


def _kib(n: Optional[float]) -> str:
    return "-" if n is None else (f"{n / 1024:.0f} KB" if n >= 1024 else f"{n:.0f} B")


def _kernel_text(r: dict[str, Any], triton: dict[str, dict[str, Any]]) -> str:
    name = r["name"]
    short = name if len(name) <= 48 else name[:45] + "..."
    parts = [f"{r['share_pct']:.0f}% of GPU time" if r.get("share_pct") is not None else f"{r['us']:.0f} us"]
    if r.get("launches", 0) > 1:
        parts.append(f"{r['launches']} launches")
    if r.get("grid"):
        parts.append("grid " + "x".join(str(d) for d in r["grid"]))
    if r.get("block"):
        parts.append(f"{math.prod(r['block'])} threads/block")
    t = next((v for k, v in triton.items() if k and k in name), None)
    regs = r.get("registers") if r.get("registers") is not None else (t or {}).get("n_regs")
    if regs is not None:
        parts.append(f"{regs:.0f} registers/thread")
    if t is not None and t.get("n_spills") is not None:
        parts.append(f"{t['n_spills']:.0f} spills")
    if r.get("shared_bytes"):
        parts.append(f"{_kib(r['shared_bytes'])} shared")
    if r.get("occupancy_pct") is not None:
        parts.append(f"est. occupancy {r['occupancy_pct']:.0f}%")
    return f"{short} ({', '.join(parts)})"


def summary(profile: Optional[dict[str, Any]]) -> Optional[str]:
    """A short readable line for the LLM and `kgen show`: where the GPU time went and how close the
    whole forward came to the ceilings. None without a profile."""
    if not profile:
        return None
    triton = {t["kernel"]: t for t in profile.get("triton") or [] if t.get("kernel")}
    kernels = [r for r in profile.get("kernels") or [] if r.get("us")]
    pieces = []
    achieved = profile.get("achieved") or {}
    if achieved.get("bandwidth_pct") is not None:
        pieces.append(f"{achieved['bandwidth_gb_s']:.0f} GB/s = {achieved['bandwidth_pct']:.0f}% of measured "
                      f"bandwidth, {achieved['tflop_s']:.2f} TFLOP/s = {achieved.get('compute_pct', 0):.0f}% of the "
                      "compute ceiling (at minimum traffic)")
    if kernels:
        own = [r for r in kernels if r.get("whose") == "own"]
        shown = (own or kernels)[:3]
        head = f"{len(kernels)} kernel{'s' if len(kernels) != 1 else ''}: "
        pieces.append(head + "; ".join(_kernel_text(r, triton) for r in shown)
                      + ("; ..." if len(kernels) > len(shown) else ""))
    elif triton:
        pieces.append("; ".join(f"{k} ({v.get('n_regs') or 0:.0f} registers/thread, {v.get('n_spills') or 0:.0f} "
                                "spills)" for k, v in list(triton.items())[:3]))
    return ". ".join(pieces) or None
