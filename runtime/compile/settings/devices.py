"""Whether a device can be compiled for here: a real device (no meta-device) that this
OpenVINO has a plugin for and compiles a graph for; refused in one line before any work."""

from __future__ import annotations

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.ov_core import core, openvino_error_summary
from compile_ahead.runtime.compile.settings.properties import check_device_compiles

# OpenVINO's devices made of other devices: they cannot export a compiled graph (the cache and
# the worker need that) nor answer the properties a rung is compiled with.
META_DEVICES = ("AUTO", "HETERO", "MULTI", "BATCH")


def check_device(device: str) -> None:
    """A device OpenVINO has a plugin for and compiles for here; refused before any work
    otherwise."""
    if device.partition(":")[0].upper() in META_DEVICES:
        real = [d for d in core().available_devices if d.split(".")[0] not in META_DEVICES]
        raise CompileAheadError(
            f"--device {device}: meta-devices ({', '.join(META_DEVICES)}) are not supported "
            "(each rung is compiled, exported and timed on one device); name a real one: "
            f"{', '.join(real) or 'CPU'}"
        )
    try:
        known = bool(core().get_versions(device))
    except RuntimeError as err:
        raise CompileAheadError(f"--device {device}: {openvino_error_summary(err)}") from None
    if not known:
        raise CompileAheadError(
            f"--device {device}: not a device of this OpenVINO (available here: "
            f"{', '.join(core().available_devices)})"
        )
    check_device_compiles(device)
