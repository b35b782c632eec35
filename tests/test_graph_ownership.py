"""A graph owns what it points at (issue 34): a graph built from a source that is then deleted
and garbage-collected compiles, and the compiled graph, left alone, gives the same outputs as
one whose source is held: a bf16 checkpoint, its split weight parts, bf16 weights drawn in
memory and an IR. Each arm runs in a child process (tests/owned_graphs_child.py), so a graph
reading unmapped weights fails its test instead of killing pytest."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import random_qwen2_checkpoint

CHILD = Path(__file__).with_name("owned_graphs_child.py")


@pytest.fixture(scope="module")
def bf16_checkpoint(tmp_path_factory) -> Path:
    """A transformers random init saved in bf16, as the published Qwen2.5 checkpoints are."""
    import torch

    return random_qwen2_checkpoint(tmp_path_factory.mktemp("bf16-qwen2"), dtype=torch.bfloat16)


@pytest.fixture(scope="module")
def fp16_ir(tmp_path_factory) -> Path:
    """The tiny preset saved as an optimum-style stateful IR with FP16 weights."""
    import openvino as ov

    from compile_ahead.runtime.graphs.stateful import build_stateful_model
    from compile_ahead.runtime.sources.resolve import resolve_model

    tiny = resolve_model("tiny")
    out = tmp_path_factory.mktemp("fp16-ir")
    model = build_stateful_model(tiny.config, tiny.weights)
    ov.save_model(model, str(out / "openvino_model.xml"), compress_to_fp16=True)
    assert tiny.model_dir is not None
    shutil.copy(tiny.model_dir / "config.json", out / "config.json")
    return out


def child_outputs(case: str, model: str | Path, mode: str, tmp_path: Path) -> list[np.ndarray]:
    out = tmp_path / f"{case}-{mode}.npz"
    done = subprocess.run(
        [sys.executable, str(CHILD), case, str(model), mode, str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (
        f"{case}, source {mode}: exit {done.returncode}\n{done.stderr[-3000:]}"
    )
    with np.load(out) as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


@pytest.mark.parametrize("case", ["checkpoint", "split", "in-memory", "ir"])
def test_a_graph_outlives_its_dropped_source(case, bf16_checkpoint, fp16_ir, tmp_path):
    model = {"checkpoint": bf16_checkpoint, "split": bf16_checkpoint, "ir": fp16_ir}.get(
        case, "tiny"
    )
    held = child_outputs(case, model, "held", tmp_path)
    dropped = child_outputs(case, model, "dropped", tmp_path)
    assert len(held) == len(dropped) > 0
    assert all(a.any() for a in held)
    assert all(np.isfinite(a).all() for a in held if a.dtype == np.float32)  # logits, hidden
    for a, b in zip(held, dropped, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b)
