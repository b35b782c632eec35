"""Models profile-compile compiles as they are: any OpenVINO IR or ONNX file that is not a
stateful decoder (a stateful decoder is profiled per ladder rung instead).

Dynamic inputs must be made static with ``--shape NAME=[d0,d1,...]``: a static-shape device
compiles one shape, and the profile should be of the shape that will run.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from compile_ahead.errors import CompileAheadError

if TYPE_CHECKING:
    import openvino as ov

    from compile_ahead.runtime.compile.settings.options import CompileOptions

_SHAPE = re.compile(r"^(?P<name>[^=]+)=\[(?P<dims>[0-9,\s]*)\]$")


def parse_shapes(items: list[str]) -> dict[str, list[int]]:
    """``--shape NAME=[1,3,224,224]`` (repeatable) -> {name: dims}."""
    shapes: dict[str, list[int]] = {}
    for item in items:
        match = _SHAPE.match(item.strip())
        if match is None:
            raise CompileAheadError(f"--shape takes NAME=[d0,d1,...], got {item!r}")
        dims = [int(d) for d in match["dims"].split(",") if d.strip()]
        if any(d <= 0 for d in dims):
            raise CompileAheadError(f"--shape {item}: dimensions must be positive")
        name = match["name"].strip()
        if name in shapes:
            raise CompileAheadError(f"--shape {name} is given twice; give each input once")
        shapes[name] = dims
    return shapes


def model_file(name: str) -> Path | None:
    """The file to read when ``--model`` names an ONNX file or an IR that is not a stateful
    decoder; None for anything the ladder runtime takes (checkpoints, presets, decoder IRs)."""
    path = Path(name).expanduser()
    if path.is_file() and path.suffix.lower() == ".onnx":
        return path
    from compile_ahead.runtime.model.ir_files import is_ir_path, locate_ir

    if not path.exists() or not is_ir_path(path):
        return None
    files = locate_ir(path)
    from compile_ahead.runtime.model.ir_reader import check_stateful_decoder, read_ir

    try:
        check_stateful_decoder(read_ir(files), str(files.xml))
    except CompileAheadError:
        return files.xml
    return None


@dataclass
class ForeignCompile:
    """What profile_rung expects of a compile: the compiled model and its two timings."""

    compiled: object
    build_s: float  # reading (and reshaping) the model
    compile_s: float


def read_static(path: Path, shapes: dict[str, list[int]]) -> ov.Model:
    """Read the model and make every input static; name the input and the flag otherwise."""
    from compile_ahead.runtime.base.ov_core import core, openvino_error_summary

    try:
        model = core().read_model(str(path))
    except RuntimeError as err:
        reason = openvino_error_summary(err)
        raise CompileAheadError(f"{path}: OpenVINO cannot read it: {reason}") from None
    names = {n for port in model.inputs for n in port.get_names()}
    unknown = sorted(set(shapes) - names)
    if unknown:
        listed = ", ".join(sorted(names))
        raise CompileAheadError(f"--shape {unknown[0]}: {path.name} has no such input ({listed})")
    if shapes:
        try:
            model.reshape({name: dims for name, dims in shapes.items()})
        except RuntimeError as err:
            raise CompileAheadError(f"--shape: {openvino_error_summary(err)}") from None
    for port in model.inputs:
        shape = port.get_partial_shape()
        if shape.is_dynamic:
            name = port.get_any_name()
            # The static dimensions as they are (a wrong one would not compile), 1 elsewhere.
            example = (
                ",".join(str(d.get_length()) if d.is_static else "1" for d in shape)
                if shape.rank.is_static and shape.rank.get_length()
                else "..."
            )
            raise CompileAheadError(
                f"input {name!r} of {path.name} has a dynamic shape {shape}: pass "
                f"--shape {name}=[{example}] with every dimension set"
            )
    return model


def compile_foreign(
    path: Path, shapes: dict[str, list[int]], options: CompileOptions
) -> ForeignCompile:
    from compile_ahead.runtime.base.ov_core import compile_model
    from compile_ahead.runtime.compile.settings.options import device_config

    t0 = time.perf_counter()
    model = read_static(path, shapes)
    t1 = time.perf_counter()
    compiled = compile_model(model, options.device, device_config(options), path.name)
    t2 = time.perf_counter()
    return ForeignCompile(compiled, t1 - t0, t2 - t1)
