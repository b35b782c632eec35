"""OpenVINO helpers every layer uses: one Core per process, OpenVINO errors as one line, and a
compile that names what failed."""

from __future__ import annotations

import re

import openvino as ov

from compile_ahead.errors import CompileAheadError

_core: ov.Core | None = None


# Where OpenVINO says an error was raised ("Exception from src/...:NN:", "Check 'x' failed at
# src/...:NN:"); it may start a line or follow a message ("... Error: Exception from ...").
_OV_LOCATION = re.compile(r"(?:Exception from|Check '.*?' failed at) \S+:\d+:\s*")


# "Cannot load library "P": P: reason" names the path twice.
_OV_REPEATED_PATH = re.compile(r'"([^"]+)": \1: ')


_OV_SUMMARY_MAX = 600


def openvino_error_summary(err: BaseException) -> str:
    """An OpenVINO exception as one line that keeps its reason.

    OpenVINO nests messages under source locations, one per line; a line such as "VCL compiler
    loading failed, aborting. Error:" or "Check 'ptr' failed at ...:" is not the reason, the
    text after it is. So the locations are dropped and what remains is joined in order.
    """
    parts: list[str] = []
    for line in str(err).splitlines():
        text = _OV_LOCATION.sub("", line).strip()
        if text and (not parts or parts[-1] != text):
            parts.append(text)
    if not parts:
        return (str(err).strip().splitlines() or [repr(err)])[0]
    summary = parts[0]
    for text in parts[1:]:
        summary += (" " if summary.endswith(":") else ": ") + text
    summary = _OV_REPEATED_PATH.sub(r'"\1": ', summary)
    if summary == "std::bad_alloc":
        summary = "out of memory (std::bad_alloc)"
    if len(summary) > _OV_SUMMARY_MAX:  # keep the head (what failed) and the tail (why)
        half = _OV_SUMMARY_MAX // 2
        summary = f"{summary[:half]} ... {summary[-half:]}"
    return summary


def core() -> ov.Core:
    global _core
    if _core is None:
        _core = ov.Core()
    return _core


def compile_model(
    model: ov.Model, device: str, config: dict[str, object], what: str
) -> ov.CompiledModel:
    """core().compile_model, with OpenVINO's error turned into one line that names `what`."""
    try:
        return core().compile_model(model, device, config)
    except RuntimeError as err:
        summary = openvino_error_summary(err)
        raise CompileAheadError(f"compiling {what} for {device} failed: {summary}") from err
