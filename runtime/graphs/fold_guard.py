"""Keep OpenVINO's constant folding off the embedding lookup of f16 weights.

With a static ``input_ids`` the lookup Gather(table, input_ids) has a static output shape, and
ConstantFolding takes any Gather with a static output for a folding candidate, whatever its
inputs. The CPU plugin first moves the table's decompression Convert behind the Gather
(CompressedGatherTransformation), so the Gather reads the f16 table; every ConstantFolding run
(about ten per compile) then converts the whole table to f32 to evaluate the Gather in a
precision it supports, fails (the indices are an input) and throws the copy away: about 0.25 s
per run for qwen2.5-0.5b's 151936x896 table, 2.5-3 s per compile. A bf16 table escapes only
because Gather has no bf16 evaluate; with a dynamic ``input_ids`` the output shape is dynamic
and nothing is tried.

ConstantFolding skips a node marked with its DisableConstantFolding attribute. Set as a plain
string in rt_info, the mark is copied onto the Gather the plugin rebuilds, so it holds through
the plugin's passes. The graph and the compiled weights are unchanged: only the wasted
conversions go.
"""

from __future__ import annotations

import functools

import numpy as np
import openvino as ov
from openvino import opset13 as ops
from openvino import passes

# The attribute's rt_info name: "DisableConstantFolding_0" in OpenVINO 2026.4, in older releases
# "disabled_constant_folding_0" (a name the release does not read is ignored). Probed once.
_KEYS = ("DisableConstantFolding_0", "disabled_constant_folding_0")

_COMPRESSED = (ov.Type.f16, ov.Type.bf16)


def _key_stops_folding(key: str) -> bool:
    """Does ConstantFolding leave a Convert of a Constant alone when it carries ``key``?"""
    convert = ops.convert(ops.constant(np.zeros(2, np.float16)), ov.Type.f32)
    convert.get_rt_info()[key] = ""
    param = ops.parameter([2], ov.Type.f32)
    model = ov.Model([ops.add(param, convert)], [param])
    manager = passes.Manager()
    manager.register_pass(passes.ConstantFolding())
    manager.run_passes(model)
    return any(op.get_type_name() == "Convert" for op in model.get_ops())


@functools.cache
def disable_folding_key() -> str | None:
    """The rt_info key this OpenVINO's ConstantFolding honours, or None if none of ours."""
    return next((key for key in _KEYS if _key_stops_folding(key)), None)


def keep_lookups_unfolded(model: ov.Model) -> int:
    """Mark every Gather that reads a f16/bf16 constant table (directly or through its
    decompression Convert) as not to be constant-folded; returns how many were marked."""
    key = disable_folding_key()
    if key is None:
        return 0
    marked = 0
    for op in model.get_ops():
        if op.get_type_name() != "Gather":
            continue
        table = op.input_value(0).get_node()
        if table.get_type_name() == "Convert":
            table = table.input_value(0).get_node()
        if table.get_type_name() == "Constant" and table.get_output_element_type(0) in _COMPRESSED:
            op.get_rt_info()[key] = ""
            marked += 1
    return marked
