"""Time and memory measures: a time-weighted average with its peak, the monotonic clock, and the
process's resident memory (current and peak). A run's accounting is the ladder's
(ladder/reporting/accounting.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")


class TimeWeighted:
    """Integral of a piecewise-constant value over wall time, with its peak."""

    def __init__(self, start_ns: int, value: float = 0.0):
        self._t = start_ns
        self._value = value
        self._area = 0.0
        self._t0 = start_ns
        self.peak = value

    def set(self, ts: int, value: float) -> None:
        self._area += self._value * (ts - self._t)
        self._t = ts
        self._value = value
        self.peak = max(self.peak, value)

    def bump_peak(self, value: float) -> None:
        """A transient level too short to integrate (e.g. both buffers during a copy)."""
        self.peak = max(self.peak, value)

    def average(self, end_ns: int) -> float:
        area = self._area + self._value * (end_ns - self._t)
        span = end_ns - self._t0
        return area / span if span > 0 else self._value


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def peak_rss_bytes() -> int:
    """Process peak RSS (VmHWM) since start or the last reset_peak_rss()."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def reset_peak_rss() -> bool:
    """Restart the VmHWM peak at the current RSS, so runs in one process measure their own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def now_ns() -> int:
    return time.monotonic_ns()
