"""What an OpenVINO installation says about a device and a set of compile properties: the
device's SUPPORTED_PROPERTIES, what setting the properties raised (one line, or None), and
whether it compiles for the device at all.

Standard library and openvino only: ``ab`` arms run this file by path under their own
interpreter (another OpenVINO release, where compile_ahead may not be installed) as
``python property_facts.py DEVICE CONFIG_JSON`` (the property facts) or ``python
property_facts.py --installation DEVICE`` (its release, devices and compile error), printing
JSON.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

# Lines of an OpenVINO error that say where, not why.
_WHERE = re.compile(r"^(Exception from \S+:\d+:|Check '.*' failed at \S+:\d+:)\s*")
_NOT_THE_REASON = ("Failed to create plugin", "Please, check your environment")


def reason(err: BaseException) -> str:
    lines = [_WHERE.sub("", line).strip() for line in str(err).splitlines()]
    kept = [x for x in lines if x and not x.startswith(_NOT_THE_REASON)]
    return " ".join(kept) or str(err).strip()


def refusal(device: str, config: dict[str, str]) -> str | None:
    """What OpenVINO says when ``config`` is set on ``device`` (one line), or None if it takes
    it. Set on a fresh Core, whose plugin checks keys and values when it is created."""
    import openvino as ov

    probe = ov.Core()
    try:
        probe.set_property(device, dict(config))
        # The plugin takes properties set before it exists when it is created: create it.
        probe.get_property(device, "SUPPORTED_PROPERTIES")
    except RuntimeError as err:
        return reason(err)
    return None


def gather(device: str, config: dict[str, str], core: Any = None) -> dict[str, Any]:
    """{"supported": {key: RO/RW/WO}, "value_error": str | None}. The values are set on a
    fresh Core (``core``, the caller's, is only asked), and only when every key is settable."""
    import openvino as ov

    core = core or ov.Core()
    raw = core.get_property(device, "SUPPORTED_PROPERTIES")
    supported = {str(k): str(v) for k, v in raw.items()}
    error = None
    if config and all(supported.get(k, "RO") != "RO" for k in config):
        error = refusal(device, config)
    return {"supported": supported, "value_error": error}


def compile_error(device: str, core: Any = None) -> str | None:
    """OpenVINO's message when a one-op model is compiled on ``device``, or None when it
    compiles. A device whose plugin is installed may still be unable to compile here (the NPU
    plugin without its compiler library fails only when asked to compile)."""
    import openvino as ov

    try:
        from openvino import opset8 as ops
    except ImportError:  # older releases keep the opsets under openvino.runtime only
        from openvino.runtime import opset8 as ops

    param = ops.parameter([1], ov.Type.f32, name="x")
    model = ov.Model([ops.relu(param)], [param], "compile_probe")
    try:
        (core or ov.Core()).compile_model(model, device)
    except RuntimeError as err:
        return str(err)
    return None


def installation(device: str) -> dict[str, Any]:
    """The release, devices and compile error an ``ab`` arm's interpreter reports."""
    import importlib.util

    import openvino as ov

    return {
        "openvino": ov.get_version(),
        "devices": ov.Core().available_devices,
        "compile_ahead": importlib.util.find_spec("compile_ahead") is not None,
        "compile_error": compile_error(device),
    }


if __name__ == "__main__":
    if sys.argv[1] == "--installation":
        print(json.dumps(installation(sys.argv[2])))
    else:
        print(json.dumps(gather(sys.argv[1], json.loads(sys.argv[2]))))
