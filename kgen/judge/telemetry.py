"""The GPU's state around a timed measurement: SM and memory clocks, temperature, power, and whether
the driver was holding the clocks down (power cap, thermal slowdown) — read through NVML
(`nvidia-ml-py`). A time taken while the GPU throttled is slower than the kernel deserves, so kgen
records the state before and after each timing, candidates and baselines alike, and flags it.

Without a GPU, NVML or the package, every function returns None: telemetry is evidence, never a
condition for a verdict.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

# NVML clock-event ("throttle") reason bits that mean the clocks were held below what the kernel
# asked for. Idle (0x1), application-clock setting (0x2) and sync boost (0x10) are left out: they
# are normal states of a busy or idle GPU, not a slowdown imposed on a measurement.
THROTTLE_REASONS = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}

_lock = threading.Lock()
_nvml: Any = None  # the pynvml module once nvmlInit succeeded; False once it failed


def _load() -> Any:
    global _nvml
    with _lock:
        if _nvml is None:
            try:
                import pynvml

                pynvml.nvmlInit()
                _nvml = pynvml
            except Exception:  # noqa: BLE001 - no package, no driver, no GPU: no telemetry
                _nvml = False
        return _nvml or None


def _handle(nvml: Any, device: Any) -> Any:
    """The NVML handle of a torch CUDA device: by UUID, which survives CUDA_VISIBLE_DEVICES remapping
    (NVML numbers GPUs as the driver does, torch as the environment shows them)."""
    import torch

    index = device.index if getattr(device, "index", None) is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        for candidate in (text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}", text):
            try:
                return nvml.nvmlDeviceGetHandleByUUID(candidate)
            except Exception:  # noqa: BLE001 - try the next spelling, then the bus id
                continue
    bus = "{:08x}:{:02x}:{:02x}.0".format(getattr(props, "pci_domain_id", 0), props.pci_bus_id, props.pci_device_id)
    return nvml.nvmlDeviceGetHandleByPciBusId(bus)


def _read(call, *args) -> Optional[float]:
    try:
        return call(*args)
    except Exception:  # noqa: BLE001 - a field this GPU or driver does not report
        return None


def decode_reasons(mask: Optional[int]) -> list[str]:
    """The names of the throttling reasons set in an NVML clock-event mask."""
    if not mask:
        return []
    return [name for bit, name in THROTTLE_REASONS.items() if int(mask) & bit]


def sample(device: Any = None) -> Optional[dict[str, Any]]:
    """One reading of the GPU's clocks, temperature and power, or None where NVML cannot be read."""
    nvml = _load()
    if nvml is None:
        return None
    try:
        handle = _handle(nvml, device)
    except Exception:  # noqa: BLE001
        return None
    reasons_of = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    mask = _read(reasons_of, handle) if reasons_of else None
    power = _read(nvml.nvmlDeviceGetPowerUsage, handle)
    limit = _read(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    return {
        "sm_clock_mhz": _read(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
        "mem_clock_mhz": _read(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM),
        "max_sm_clock_mhz": _read(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM),
        "temperature_c": _read(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
        "power_w": None if power is None else round(power / 1000.0, 1),
        "power_limit_w": None if limit is None else round(limit / 1000.0, 1),
        "throttle_mask": mask,
        "throttle_reasons": decode_reasons(mask),
    }


def around(before: Optional[dict[str, Any]], after: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The telemetry stored with a timing: both readings, and `throttled` when either saw the clocks
    held down."""
    if before is None and after is None:
        return None
    reasons = sorted({r for s in (before, after) if s for r in s.get("throttle_reasons") or []})
    return {"before": before, "after": after, "throttled": bool(reasons), "throttle_reasons": reasons}


def summary(telemetry: Optional[dict[str, Any]]) -> str:
    """One line for `kgen show`: clocks, temperature, power, and the throttling flag."""
    if not telemetry:
        return "not recorded (no GPU or no NVML)"
    s = telemetry.get("after") or telemetry.get("before") or {}
    parts = []
    if s.get("sm_clock_mhz") is not None:
        top = f" of {s['max_sm_clock_mhz']:.0f}" if s.get("max_sm_clock_mhz") else ""
        parts.append(f"SM {s['sm_clock_mhz']:.0f}{top} MHz")
    if s.get("mem_clock_mhz") is not None:
        parts.append(f"memory {s['mem_clock_mhz']:.0f} MHz")
    if s.get("temperature_c") is not None:
        parts.append(f"{s['temperature_c']:.0f} °C")
    if s.get("power_w") is not None:
        limit = f" of {s['power_limit_w']:.0f}" if s.get("power_limit_w") else ""
        parts.append(f"{s['power_w']:.0f}{limit} W")
    flag = ("THROTTLED: " + ", ".join(telemetry.get("throttle_reasons") or [])) if telemetry.get("throttled") \
        else "not throttled"
    return ", ".join([*parts, flag])
