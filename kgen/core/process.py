"""This process as Linux sees it: how long ago it started (what kgen's own start and imports cost before its work
began: `kgen eval`'s breakdown, an evaluator's start figures)."""

from __future__ import annotations

import os
from typing import Optional


def process_age_s() -> Optional[float]:
    """Seconds since this process started (Linux: /proc); None where it cannot tell."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
        return round(uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError):
        return None
