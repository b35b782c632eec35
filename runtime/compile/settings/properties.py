"""OpenVINO compile properties given by the user: ``KEY=VALUE`` items (``--ov-config`` and the
KEY=VALUE items of an ``ab`` arm), a benchmark_app ``-load_config`` file (``{"CPU": {"KEY":
"VALUE"}}``), and the one check that refuses a key the device does not take, or a value it
rejects, before any work.

The check decides from facts about an OpenVINO installation (the device's settable properties
and what setting the values said), so an ``ab`` arm running another OpenVINO is judged by the
same rules on its own facts. Importing this module does not load OpenVINO.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from compile_ahead.errors import CompileAheadError

# A property key as OpenVINO names them (e.g. INFERENCE_PRECISION_HINT, NPU_COMPILATION_MODE).
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.]*$")
# The mutability OpenVINO reports for a property a compile cannot set.
_READ_ONLY = "RO"


def parse_property(item: str, what: str) -> tuple[str, str]:
    """``KEY=VALUE`` (the value may itself contain ``=``) as (key, value)."""
    key, sep, value = item.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not _KEY.match(key) or not value:
        raise CompileAheadError(
            f"{what} {item!r}: expected KEY=VALUE, e.g. DYNAMIC_QUANTIZATION_GROUP_SIZE=0"
        )
    return key, value


def parse_properties(items: Iterable[str], what: str) -> dict[str, str]:
    """Repeated ``KEY=VALUE`` items; a key given twice with different values is refused."""
    out: dict[str, str] = {}
    for item in items:
        key, value = parse_property(item, what)
        if out.get(key, value) != value:
            raise CompileAheadError(f"{what}: {key} given twice ({out[key]} and {value})")
        out[key] = value
    return out


def _value_text(value: object, where: str) -> str:
    if isinstance(value, bool):  # OpenVINO reads booleans as YES/NO
        return "YES" if value else "NO"
    if isinstance(value, str | int | float):
        return str(value)
    raise CompileAheadError(f"{where}: expected a string or number, got {json.dumps(value)}")


# A -load_config file is a few properties per device: a stated cap keeps a wrong path (a
# device, a huge file) from filling memory.
PROPERTIES_FILE_MAX_BYTES = 16 * 2**20


def load_properties_file(path: str | Path, device: str, what: str) -> dict[str, str]:
    """The entry of ``device`` in a benchmark_app ``-load_config`` file: ``{"CPU": {"KEY":
    "VALUE"}}``. ``NPU.0`` falls back to the ``NPU`` entry; no entry for the device is an error
    (the file would silently do nothing)."""
    from compile_ahead.output.input_files import read_input_text

    path = Path(path).expanduser()
    text = read_input_text(path, f"{what} {path}", PROPERTIES_FILE_MAX_BYTES)
    try:
        data = json.loads(text)
    except ValueError as err:
        raise CompileAheadError(f"{what} {path}: not JSON ({err})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise CompileAheadError(
            f'{what} {path}: expected {{"DEVICE": {{"KEY": "VALUE", ...}}, ...}}'
        )
    entry = data.get(device, data.get(device.split(".")[0]))
    if entry is None:
        raise CompileAheadError(
            f"{what} {path}: no entry for {device} (it has: {', '.join(data) or 'none'})"
        )
    out = {}
    for key, value in entry.items():
        if not _KEY.match(key):
            raise CompileAheadError(f"{what} {path}: {key!r} is not a property key")
        out[key] = _value_text(value, f"{what} {path}: {device}.{key}")
    return out


@dataclass(frozen=True)
class DeviceFacts:
    """What an OpenVINO installation says about a device and a set of properties."""

    device: str
    supported: Mapping[str, str]  # SUPPORTED_PROPERTIES: key -> RO / RW / WO
    value_error: str | None = None  # what setting the properties raised, as one line


def settable(facts: DeviceFacts) -> list[str]:
    return sorted(k for k, mode in facts.supported.items() if str(mode) != _READ_ONLY)


# A refusal names this many keys (and counts the rest), each key or value cut to _SHOWN_CHARS:
# a file of thousands of unknown keys still gets one readable line.
_LISTED_KEYS = 5
_SHOWN_CHARS = 80


def _shown(text: str, limit: int = _SHOWN_CHARS) -> str:
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _listed(items: list[str], what: str) -> list[str]:
    more = len(items) - _LISTED_KEYS
    return items[:_LISTED_KEYS] + ([f"and {more} more {what}"] if more > 0 else [])


def _core_property(key: str, device: str) -> str | None:
    """Why a key that configures OpenVINO's Core rather than the device is refused."""
    if key == "CACHE_DIR":
        return (
            f"CACHE_DIR is OpenVINO's own model cache (a property of the Core, not of "
            f"{device}); compile-ahead caches compiled graphs itself: --cache-dir DIR moves that "
            "cache (run, generate), --no-cache turns it off, and profile-compile and ab trials "
            "always compile for real"
        )
    return None


def check_properties(config: Mapping[str, str], facts: DeviceFacts, what: str) -> None:
    """The one check: every key is one the device can be given, and OpenVINO took the values.
    Each refusal is one line; a key the device does not take names its settable keys."""
    core = [why for k in config if (why := _core_property(k, facts.device)) is not None]
    if core:
        raise CompileAheadError(f"{what}: {core[0]}")
    keys = set(settable(facts))
    refused = [k for k in config if k not in keys]
    if refused:
        reasons = [
            f"{_shown(k)} is read-only on {facts.device}"
            if k in facts.supported
            else f"{_shown(k)} is not a property {facts.device} supports"
            for k in refused
        ]
        raise CompileAheadError(
            f"{what}: {'; '.join(_listed(reasons, f'keys {facts.device} does not take'))}; "
            f"its settable properties: {', '.join(settable(facts))}"
        )
    if facts.value_error is not None:
        pairs = ", ".join(_listed([f"{k}={_shown(v)}" for k, v in config.items()], "properties"))
        error = _shown(facts.value_error, 600)
        raise CompileAheadError(f"{what} {pairs}: {facts.device} refused it: {error}")


def device_facts(device: str, config: Mapping[str, str]) -> DeviceFacts:
    """This process's OpenVINO on ``device`` (property_facts.py, which ``ab`` arms run under
    their own interpreters). Asked once per device and properties in a process: a campaign
    checks every cell with the same ones, and each asking creates a plugin."""
    return _device_facts(device, tuple(sorted((str(k), str(v)) for k, v in config.items())))


@functools.lru_cache(maxsize=64)
def _device_facts(device: str, pairs: tuple[tuple[str, str], ...]) -> DeviceFacts:
    from compile_ahead.runtime.base.ov_core import core, openvino_error_summary
    from compile_ahead.runtime.compile.settings.device_defaults import decode_properties
    from compile_ahead.runtime.compile.settings.options import device_refusal
    from compile_ahead.runtime.compile.settings.property_facts import gather

    config = dict(pairs)
    try:
        found = gather(device, config, core())
    except RuntimeError as err:  # no such device: its properties cannot be asked
        raise CompileAheadError(f"--device {device}: {openvino_error_summary(err)}") from None
    supported, error = dict(found["supported"]), found["value_error"]
    # A property our defaults set that the device takes unlisted can be set by the user too.
    for key, value in decode_properties(device).items():
        if key not in supported and device_refusal(device, key, value) is None:
            supported[key] = "RW"
            if key in config:
                error = error or device_refusal(device, key, str(config[key]))
    return DeviceFacts(device, supported, error)


def cannot_compile(device: str, error: str) -> str:
    """The one line that refuses a device OpenVINO lists but cannot compile for, with
    OpenVINO's reason (``error``, its message)."""
    from compile_ahead.runtime.base.ov_core import openvino_error_summary

    reason = openvino_error_summary(RuntimeError(error))
    return f"--device {device}: OpenVINO cannot compile for {device} here: {reason}"


@functools.cache
def _compile_error(device: str) -> str | None:
    from compile_ahead.runtime.base.ov_core import core
    from compile_ahead.runtime.compile.settings.property_facts import compile_error

    return compile_error(device, core())


def check_device_compiles(device: str) -> None:
    """Refuse, before any model is opened, a device this process's OpenVINO cannot compile
    for: one one-op compile per device and process."""
    error = _compile_error(device)
    if error is not None:
        raise CompileAheadError(cannot_compile(device, error))


def checked_properties(device: str, config: Mapping[str, str], what: str) -> dict[str, str]:
    """``config`` checked against this process's OpenVINO (see check_properties)."""
    if config:
        check_properties(config, device_facts(device, config), what)
    return dict(config)
