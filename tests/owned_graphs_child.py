"""Build a source's graphs, optionally drop the source (and then the graphs), compile, infer
once and save every output: run in a child process by tests/test_graph_ownership.py, so a
graph that outlives its weights crashes this process rather than pytest.

    python tests/owned_graphs_child.py CASE MODEL MODE OUT.npz

CASE: checkpoint (a decode graph), split (every weight part), in-memory (a decode graph of
bf16 weights drawn in memory; MODEL is a preset), ir (a decode graph cut from an IR).
MODE: held (the source lives to the end) or dropped (deleted and collected before the
compile, the graphs deleted and collected before the inference).
"""

from __future__ import annotations

import gc
import sys

import numpy as np
import openvino as ov

from compile_ahead.runtime.base.precision import f32_to_bf16_bits
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.graphs.split import build_weight_part
from compile_ahead.runtime.model.presets import PRESETS
from compile_ahead.runtime.model.synthetic_store import SyntheticStore
from compile_ahead.runtime.sources.base import ModelSource
from compile_ahead.runtime.sources.checkpoint import CheckpointSource
from compile_ahead.runtime.sources.resolve import resolve_model

KV = "bf16"


def source_of(case: str, model: str) -> ModelSource:
    if case == "in-memory":
        cfg = PRESETS[model].config
        return CheckpointSource(model, cfg, SyntheticStore(cfg, 0, dtype="bf16"), True, "in memory")
    return resolve_model(model)


def graphs_of(case: str, source: ModelSource) -> list[ov.Model]:
    if case == "split":
        cfg = source.config
        return [build_weight_part(cfg, source.weights, i, KV) for i in range(cfg.num_layers + 1)]
    return [source.build_graph(GraphSpec(capacity=64, kv_precision=KV))]


def feed(port: ov.ConstOutput, rng: np.random.Generator) -> ov.Tensor:
    """Integers 1 (a token id, a past length, an all-ones mask), floats seeded normals."""
    etype, shape = port.get_element_type(), list(port.get_shape())
    if etype.is_integral():
        return ov.Tensor(np.ones(shape, dtype=etype.to_dtype()))
    values = rng.standard_normal(shape, dtype=np.float32)
    if etype == ov.Type.bf16:
        tensor = ov.Tensor(etype, shape)
        tensor.data.view(np.uint16)[...] = f32_to_bf16_bits(values)
        return tensor
    return ov.Tensor(values.astype(etype.to_dtype()))


def outputs(compiled: ov.CompiledModel) -> list[np.ndarray]:
    request = compiled.create_infer_request()
    rng = np.random.default_rng(0)
    for port in compiled.inputs:
        request.set_tensor(port, feed(port, rng))
    request.infer()
    return [np.array(request.get_tensor(port).data) for port in compiled.outputs]


def main(case: str, model: str, mode: str, out: str) -> None:
    source = source_of(case, model)
    graphs = graphs_of(case, source)
    if mode == "dropped":
        del source
        gc.collect()
    compiled = [ov.Core().compile_model(graph, "CPU") for graph in graphs]
    if mode == "dropped":
        del graphs
        gc.collect()
    results = [array for c in compiled for array in outputs(c)]
    np.savez(out, *results)


if __name__ == "__main__":
    main(*sys.argv[1:])
