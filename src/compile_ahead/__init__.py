"""compile-ahead: compile the next KV capacity while the device decodes.

Subpackages: ``compile_ahead.runtime`` (models, graphs, ladder schedules) and
``compile_ahead.profiling`` (traces, counters, A/B trials). Importing this package must stay
cheap and must not import openvino: the compile-phase collector has to be announced to
OpenVINO before its library loads.

On import, ``INTEL_LIBITTNOTIFY64`` is pointed at the package's ITT collector
(``compile_ahead._itt``) unless it is already set (e.g. to VTune's collector) or
``COMPILE_AHEAD_ITT=0`` opts out. Whether that came in time is recorded: see
:func:`compile_ahead.itt_collector.collector_status`.
"""

import importlib.util as _importlib_util
import os as _os
import sys as _sys

__version__ = "0.1.0"

ITT_ENV = "INTEL_LIBITTNOTIFY64"
ITT_OPT_OUT_ENV = "COMPILE_AHEAD_ITT"  # "0": leave OpenVINO without a collector


def _libopenvino_mapped() -> bool:
    """True when libopenvino is already in this process (imported by any route)."""
    if "openvino" in _sys.modules:
        return True
    try:
        with open("/proc/self/maps", "rb") as maps:
            return b"libopenvino.so" in maps.read()
    except OSError:
        return False


def _announce_itt_collector() -> tuple[str | None, bool, bool]:
    """Set the collector path; returns (path or None, env was already set, openvino was early)."""
    early = _libopenvino_mapped()
    if _os.environ.get(ITT_ENV):
        return _os.environ[ITT_ENV], True, early
    if _os.environ.get(ITT_OPT_OUT_ENV) == "0":
        return None, False, early
    spec = _importlib_util.find_spec("compile_ahead._itt")
    if spec is None or not spec.origin:
        return None, False, early
    _os.environ[ITT_ENV] = spec.origin
    return spec.origin, False, early


# Read by compile_ahead.itt_collector; private to the package.
_ITT_COLLECTOR_PATH, _ITT_ENV_PRESET, _OPENVINO_LOADED_BEFORE_ITT = _announce_itt_collector()
