"""What an OpenVINO installation says about a device and a set of compile properties: the
device's SUPPORTED_PROPERTIES, and what setting the properties raised (one line, or None).

Standard library and openvino only: ``ab`` arms run this file by path under their own
interpreter (another OpenVINO release, where compile_ahead may not be installed) as
``python property_facts.py DEVICE CONFIG_JSON``, printing the facts as JSON.
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


if __name__ == "__main__":
    print(json.dumps(gather(sys.argv[1], json.loads(sys.argv[2]))))
