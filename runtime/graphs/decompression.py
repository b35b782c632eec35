"""Weight decompression marks: a Convert from an f16/bf16 weight constant to f32 marked this way
is kept compressed by the CPU plugin and decompressed as it runs; unmarked, the plugin folds
the weights to f32 at compile time (twice the memory).

OpenVINO does not save the mark in an IR, so a graph read back from a file is marked again.
This module needs only OpenVINO: the `ab compile` trial loads it by path in an interpreter
that may have no compile_ahead installed.
"""

from __future__ import annotations

import openvino as ov

DECOMPRESSION_KEY = "decompression_0"  # the rt_info key the plugin looks for, exactly
COMPRESSED_TYPES = (ov.Type.f16, ov.Type.bf16)


def mark_decompression(convert: ov.Node) -> None:
    convert.get_rt_info()[DECOMPRESSION_KEY] = ""


def is_weight_decompression(op: ov.Node) -> bool:
    """Convert(Constant f16/bf16) -> f32: a weight stored compressed."""
    if op.get_type_name() != "Convert" or op.get_output_element_type(0) != ov.Type.f32:
        return False
    source = op.input_value(0).get_node()
    return (
        source.get_type_name() == "Constant"
        and source.get_output_element_type(0) in COMPRESSED_TYPES
    )


def mark_weight_decompression(model: ov.Model) -> int:
    """Mark every weight decompression Convert of ``model``; returns how many were marked."""
    marked = 0
    for op in model.get_ordered_ops():
        if is_weight_decompression(op):
            mark_decompression(op)
            marked += 1
    return marked
