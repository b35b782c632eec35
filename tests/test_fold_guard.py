"""A static rung graph of f16 weights compiles without the CPU plugin converting its embedding
table over and over (runtime/graphs/fold_guard.py), and keeps the table compressed: checked on the
plugin's own pass profile and runtime model, not on our ov.Model."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compile_ahead.profiling.session.passprofile import parse_file
from compile_ahead.runtime.graphs.fold_guard import disable_folding_key, keep_lookups_unfolded

# A table large enough for its conversions to dominate the compile (65536 x 256 f16, 16.7M
# elements: about 0.05 s per ConstantFolding run), around one tiny layer.
VOCAB, HIDDEN = 65536, 256
SHAPES = dict(
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    intermediate_size=512,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    tie_word_embeddings=True,
)

# Runs in a child: OV_ENABLE_PROFILE_PASS must be set before OpenVINO loads. Builds the C=64
# decode graph from the checkpoint, compiles it on the CPU and prints the runtime model's
# constants as [precision, shape].
COMPILE = """
import json, sys
from pathlib import Path
import openvino as ov
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.sources.checkpoint import load_checkpoint
source = load_checkpoint(Path(sys.argv[1]))  # holds the weights the graph aliases
runtime = ov.Core().compile_model(source.build_graph(GraphSpec(64)), "CPU").get_runtime_model()
consts = []
for node in runtime.get_ops():
    info = node.get_rt_info()
    if info["layerType"].astype(str) == "Const":
        shape = [d.get_length() for d in node.get_output_partial_shape(0)]
        consts.append([info["outputPrecisions"].astype(str), shape])
print(json.dumps(consts))
"""


@pytest.fixture(scope="module")
def f16_checkpoint(tmp_path_factory) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**SHAPES)).eval().to(torch.float16)
    path = tmp_path_factory.mktemp("f16-big-vocab")
    model.save_pretrained(path)
    return path


def test_this_openvino_honours_the_mark():
    """Fails when an OpenVINO release renames its DisableConstantFolding attribute again."""
    assert disable_folding_key() is not None


def test_only_weight_lookups_are_marked():
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops

    ids = ops.parameter([1, 1], ov.Type.i64)
    table = ops.convert(ops.constant(np.zeros((8, 4), np.float16)), ov.Type.f32)
    row = ops.gather(table, ids, 0)
    pick = ops.gather(row, ops.constant(np.int64(0)), 1)  # an activation gather: left alone
    model = ov.Model([pick], [ids])
    assert keep_lookups_unfolded(model) == 1
    assert disable_folding_key() in row.get_rt_info()
    assert disable_folding_key() not in pick.get_rt_info()


def test_f16_lookup_compiles_without_converting_the_table(f16_checkpoint, tmp_path):
    passes = tmp_path / "passes.txt"
    env = {**os.environ, "OV_ENABLE_PROFILE_PASS": str(passes)}
    proc = subprocess.run(
        [sys.executable, "-c", COMPILE, str(f16_checkpoint)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    profile = parse_file(passes)
    runs, folding_ns = profile.pass_totals()["ov::pass::ConstantFolding"]
    # Unguarded, ConstantFolding converted the table to f32 in each of its runs and took about
    # 90% of the pass time on this graph; guarded, about 5%.
    assert folding_ns < 0.25 * profile.total_ns(), (runs, folding_ns, profile.total_ns())

    consts = json.loads(proc.stdout.strip().splitlines()[-1])
    tables = [precision for precision, shape in consts if shape == [VOCAB, HIDDEN]]
    assert tables and set(tables) == {"f16"}, tables  # compressed, never an f32 copy
    f32_elements = sum(math.prod(shape) for precision, shape in consts if precision == "f32")
    assert f32_elements < VOCAB * HIDDEN // 100
