"""Models profile-compile and `ab compile` take as they are (not stateful decoders): a small
vision network with dynamic inputs, as an ONNX file or as an OpenVINO IR."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def onnx_model(path: Path) -> Path:
    """A small convolution + matmul network with a dynamic batch and image size."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["pixels", "w"], ["conv"]),
        helper.make_node("Relu", ["conv"], ["act"]),
        helper.make_node("GlobalAveragePool", ["act"], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("MatMul", ["flat", "fc"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny-vision",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 4])],
        [weight, fc],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def ir_model(path: Path) -> Path:
    """The same network read by OpenVINO and saved as an IR (.xml + .bin)."""
    import openvino as ov

    ov.save_model(ov.Core().read_model(str(onnx_model(path.with_suffix(".onnx")))), path)
    return path
