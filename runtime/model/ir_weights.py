"""Name the weight format of an OpenVINO IR from its constants, for run headers and reports.

NNCF-compressed IRs keep low-bit weight constants (u8/i8 per output channel, u4/i4 in groups)
followed by a Convert, an optional Subtract of a zero point (asymmetric) and a Multiply by the
scale; float IRs hold f16/bf16/f32 matrices (f16 and bf16 behind a decompression Convert).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import openvino as ov

_INT_BITS = {"u8": 8, "i8": 8, "u4": 4, "i4": 4}
_FLOATS = {"f16": "FP16", "bf16": "BF16", "f32": "FP32"}


@dataclass(frozen=True)
class WeightFormat:
    parts: tuple[tuple[str, int], ...]  # (format, number of weight matrices), most first

    @property
    def summary(self) -> str:
        """e.g. "INT4 group-wise asym g32 (14) + INT8 per-channel asym (2)"."""
        if not self.parts:
            return "unknown"
        return " + ".join(f"{name} ({n})" for name, n in self.parts)

    @property
    def primary(self) -> str:
        return self.parts[0][0] if self.parts else "unknown"


def _consumers(node: ov.Node) -> list[ov.Node]:
    return [t.get_node() for out in node.outputs() for t in out.get_target_inputs()]


def _is_zero_point(convert: ov.Node) -> bool:
    """A converted constant subtracted from the weight (input 1 of a Subtract)."""
    return any(
        t.get_node().get_type_name() == "Subtract" and t.get_index() == 1
        for t in convert.output(0).get_target_inputs()
    )


def _int_format(const: ov.Node, convert: ov.Node) -> str:
    bits = _INT_BITS[const.get_element_type().to_string()]
    shape = list(const.get_output_partial_shape(0).to_shape())
    asym = any(n.get_type_name() == "Subtract" for n in _consumers(convert))
    kind = "asym" if asym else "sym"
    if len(shape) == 3:
        return f"INT{bits} group-wise {kind} g{shape[2]}"
    return f"INT{bits} per-channel {kind}"


def weight_format(model: ov.Model) -> WeightFormat:
    """Count weight matrices (rank >= 2 constants feeding a MatMul or Gather) by format."""
    counts: Counter[str] = Counter()
    for node in model.get_ordered_ops():
        if node.get_type_name() != "Constant":
            continue
        pshape = node.get_output_partial_shape(0)
        if pshape.rank.get_length() < 2 or int(np.prod(list(pshape.to_shape()))) < 256:
            continue  # scalars, shapes, masks and tiny tables are not weights
        etype = node.get_element_type().to_string()
        consumers = _consumers(node)
        if etype in _INT_BITS:
            convert = next((c for c in consumers if c.get_type_name() == "Convert"), None)
            if convert is None or _is_zero_point(convert):
                continue
            counts[_int_format(node, convert)] += 1
        elif etype in _FLOATS and _feeds_weight_op(node):
            counts[_FLOATS[etype]] += 1
    return WeightFormat(tuple(counts.most_common()))


def _feeds_weight_op(node: ov.Node, depth: int = 3) -> bool:
    """Whether a float constant reaches a MatMul or Gather through at most a Convert or two."""
    for consumer in _consumers(node):
        kind = consumer.get_type_name()
        if kind in ("MatMul", "Gather"):
            return True
        if kind == "Convert" and depth > 0 and _feeds_weight_op(consumer, depth - 1):
            return True
    return False
