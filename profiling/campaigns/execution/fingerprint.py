"""The machine a block ran on: what can change a compile's or a decode's time between machines.

The digest covers the CPU model, the instruction-set flags that change the CPU plugin's kernels
(AVX-512 and its BF16/FP16/VNNI forms, AMX), logical and usable CPUs, memory (whole GiB), the
kernel release, the frequency governor and turbo where the kernel shows them, the Python
version, and the OpenVINO build each arm loads. The host name is recorded beside it but not
digested: two identical machines pool, one machine with another OpenVINO does not.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
from pathlib import Path

# Flags whose presence selects other kernels in the CPU plugin (and in oneDNN under it).
PATH_FLAGS = (
    "avx2",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
)
_UNREADABLE = "unreadable"


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _cpuinfo() -> tuple[str, list[str]]:
    model, flags = _UNREADABLE, set[str]()
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == _UNREADABLE:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    return model, [f for f in PATH_FLAGS if f in flags]


def _memory_gib() -> int | None:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 2**20)
    return None


def _turbo() -> str:
    no_turbo = _read("/sys/devices/system/cpu/intel_pstate/no_turbo")
    if no_turbo is not None:
        return "off" if no_turbo == "1" else "on"
    boost = _read("/sys/devices/system/cpu/cpufreq/boost")
    if boost is not None:
        return "on" if boost == "1" else "off"
    return _UNREADABLE


def machine() -> dict:
    """This machine's part of the fingerprint."""
    model, flags = _cpuinfo()
    governor = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    return {
        "cpu_model": model,
        "cpu_flags": flags,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "memory_gib": _memory_gib(),
        "kernel": platform.release(),
        "governor": governor or _UNREADABLE,
        "turbo": _turbo(),
        "python": platform.python_version(),
    }


def fingerprint(openvino_builds: dict[str, str]) -> dict:
    """This machine with the OpenVINO build of each arm: {"digest", "data", "host"}."""
    data = {**machine(), "openvino": dict(sorted(openvino_builds.items()))}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    return {"digest": digest, "data": data, "host": socket.gethostname()}


def describe(data: dict) -> str:
    """One line for a report: CPU, flags, cores, memory, kernel, OpenVINO builds."""
    builds = ", ".join(f"{arm} {build}" for arm, build in data.get("openvino", {}).items())
    flags = "/".join(data.get("cpu_flags", [])) or "no AVX-512/AMX"
    return (
        f"{data.get('cpu_model')} ({flags}), {data.get('usable_cpus')} of "
        f"{data.get('logical_cpus')} CPUs, {data.get('memory_gib')} GiB, kernel "
        f"{data.get('kernel')}, governor {data.get('governor')}, turbo {data.get('turbo')}; "
        f"OpenVINO {builds}"
    )
