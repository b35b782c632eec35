"""What a compile trial measures around each `compile_model`, and its noise controls.

Loaded by path by trial.py (standard library only: the trial may run under another
OpenVINO release's interpreter). Per compile: wall (perf_counter), process CPU time (user +
system of every thread, getrusage(RUSAGE_SELF) deltas), the perf counters of
compile_ahead._perfcounters where the kernel exposes them (instructions:u, cycles:u;
task-clock as a check of the counting), and the compile's own peak RSS (the peak is reset by
writing 5 to /proc/self/clear_refs before the compile and read as VmHWM after it). A measure
this process cannot take is recorded as unavailable with the reason, never as 0.

Also here: the calibration spin (`ab calibrate`: CPU work of a known size on the compiling
thread), pinning the trial to CPUs, and reading the trial's files into the page cache first.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import time
from pathlib import Path
from types import ModuleType

COUNTER_EVENTS = ("instructions:u", "cycles:u", "task-clock")
# measure name in a compile record -> counter event
COUNTER_MEASURES = {"instructions": "instructions:u", "cycles": "cycles:u"}
_CHUNK = 1 << 23  # bytes read per call when filling the page cache


def cpu_seconds() -> tuple[float, float]:
    """(user, system) CPU seconds of this process, every thread, the ended ones included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _status_bytes(field: str) -> int | None:
    """A `kB` field of /proc/self/status in bytes (VmHWM, VmRSS), None where there is none."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_peak_rss() -> str | None:
    """Reset this process's peak RSS (VmHWM) to its current RSS; the reason when it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError as err:
        return f"cannot reset the peak RSS (/proc/self/clear_refs: {err.strerror or err})"
    if _status_bytes("VmHWM") is None:
        return "no VmHWM in /proc/self/status"
    return None


def load_counters(path: str | None) -> tuple[ModuleType | None, str | None]:
    """(compile_ahead._perfcounters loaded from its file, None) or (None, reason)."""
    if not path:
        return None, "no counter module given"
    try:
        spec = importlib.util.spec_from_file_location("_perfcounters", path)
        if spec is None or spec.loader is None:
            return None, f"cannot load the counter module {path}"
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (ImportError, OSError) as err:
        return None, f"counter module not loadable in this interpreter ({err})"
    return module, None


class CompileMeter:
    """Measures one compile at a time: begin() right before it, end() right after."""

    def __init__(self, counters_path: str | None, spin_s: float = 0.0) -> None:
        self._counters, reason = load_counters(counters_path)
        self.unavailable: dict[str, str] = {}
        if self._counters is None:
            self.unavailable |= {m: str(reason) for m in (*COUNTER_MEASURES, "task_clock")}
        else:
            refused = self._counters.CounterWindow(list(COUNTER_EVENTS)).unavailable
            for measure, event in (*COUNTER_MEASURES.items(), ("task_clock", "task-clock")):
                if event in refused:
                    self.unavailable[measure] = refused[event]
        self.spin_s = spin_s
        self._window = None
        self._start: tuple[float, float, float, int | None] = (0.0, 0.0, 0.0, None)

    def begin(self) -> None:
        rss_reason = reset_peak_rss()
        if rss_reason is not None:
            self.unavailable["peak_rss"] = rss_reason
        if self._counters is not None:
            self._window = self._counters.CounterWindow(list(COUNTER_EVENTS))
        user, system = cpu_seconds()
        self._start = (time.perf_counter(), user, system, _status_bytes("VmRSS"))
        if self._window is not None:
            self._window.start()
        if self.spin_s > 0:
            spin(self.spin_s)

    def end(self) -> dict:
        readings: dict[str, dict] = self._window.stop() if self._window is not None else {}
        t1 = time.perf_counter()
        user, system = cpu_seconds()
        t0, user0, system0, rss0 = self._start
        record: dict = {
            "wall_s": t1 - t0,
            "cpu_s": (user - user0) + (system - system0),
            "user_s": user - user0,
            "sys_s": system - system0,
            "rss_start_bytes": rss0,
            "peak_rss_bytes": None if "peak_rss" in self.unavailable else _status_bytes("VmHWM"),
        }
        for measure, event in (*COUNTER_MEASURES.items(), ("task_clock", "task-clock")):
            reading = readings.get(event) or {}
            value = reading.get("value")
            if value is None and measure not in self.unavailable:
                self.unavailable[measure] = reading.get("unavailable") or "not read"
            if measure == "task_clock" and value is not None:
                value = value / 1e9  # ns -> s
            record[measure] = value
            if value is not None and reading.get("running_fraction", 1.0) < 1.0:
                record[f"{measure}_running_fraction"] = reading["running_fraction"]
        if self.spin_s > 0:
            record["calibration_spin_s"] = self.spin_s
        self._window = None
        return record


def spin(seconds: float) -> float:
    """Burn ``seconds`` of this thread's CPU time in user space (the calibration's known extra
    work); returns the thread CPU time burned. CPU time, not wall: the amount does not depend
    on how busy the machine is."""
    start = time.thread_time()
    end = start + seconds
    x = 1.0
    while time.thread_time() < end:
        for _ in range(2000):
            x = x * 1.0000001 + 1e-9
    return time.thread_time() - start


def pin(cpus: list[int]) -> list[int]:
    """Restrict this process (and the threads it starts later) to ``cpus``; the CPUs it runs on."""
    os.sched_setaffinity(0, cpus)
    return sorted(os.sched_getaffinity(0))


def openvino_files() -> list[Path]:
    """The shared libraries of the openvino package this interpreter would import (found
    without importing it)."""
    spec = importlib.util.find_spec("openvino")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(next(iter(spec.submodule_search_locations)))
    return sorted(p for p in root.rglob("*.so*") if p.is_file())


def prefetch(paths: list[Path]) -> int:
    """Read ``paths`` once into the page cache (posix_fadvise WILLNEED, then a read), so the
    first trial of an arm does not pay disk reads the later ones do not; bytes read."""
    total = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            while chunk := os.read(fd, _CHUNK):
                total += len(chunk)
        finally:
            os.close(fd)
    return total
