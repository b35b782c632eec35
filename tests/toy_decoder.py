"""A one-layer stateful decoder with optimum's interface, built in a few lines of OpenVINO
ops: an IR model for tests of what a command says about an IR."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def toy_decoder_ir(directory: Path) -> Path:
    """A one-layer stateful decoder with optimum's interface (vocabulary 8), saved as
    ``openvino_model.xml`` in ``directory``; config.json is the caller's."""
    import openvino as ov
    from openvino import opset13 as ops
    from openvino.op.util import Variable, VariableInfo

    ids = ops.parameter([-1, -1], ov.Type.i64, name="input_ids")
    mask = ops.parameter([-1, -1], ov.Type.i64, name="attention_mask")
    beam = ops.parameter([-1], ov.Type.i32, name="beam_idx")
    hidden = ops.convert(ops.unsqueeze(ids, ops.constant(np.int64(-1))), ov.Type.f32)
    new = ops.broadcast(hidden, ops.constant(np.array([1, 2, 1, 4])))
    total, sinks = hidden, []
    for kind in ("key", "value"):  # one layer: its key and value caches
        info = VariableInfo()
        info.data_shape = ov.PartialShape([-1, 2, -1, 4])
        info.data_type = ov.Type.f32
        info.variable_id = f"past_key_values.0.{kind}present.0.{kind}"
        var = Variable(info)
        init = ops.broadcast(ops.constant(np.float32(0)), ops.constant(np.array([1, 2, 0, 4])))
        past = ops.gather(ops.read_value(init, var), beam, ops.constant(np.int64(0)))
        cat = ops.concat([past, new], 2)
        sinks.append(ops.assign(cat, var))
        total = ops.add(total, ops.reduce_sum(cat, ops.constant(np.array([0, 1, 2, 3])), False))
    logits = ops.result(ops.multiply(total, ops.constant(np.ones((1, 1, 8), np.float32))))
    logits.output(0).get_tensor().set_names({"logits"})
    for p in (ids, mask, beam):
        p.output(0).get_tensor().set_names({p.get_friendly_name()})
    model = ov.Model([logits], sinks, [ids, mask, beam], "toy")
    directory.mkdir(parents=True, exist_ok=True)
    xml = directory / "openvino_model.xml"
    ov.save_model(model, str(xml), compress_to_fp16=False)
    return xml
