"""Split graphs (--graph split) of optimum-intel IRs (FP16, INT8, INT4): weight parts cut at the
IR's attentions, compiled once, and a weightless attention core per rung. Each sequence's
greedy tokens equal the whole graphs' and LLMPipeline's, at B=1 and at B=4 with ragged
prompts, on i2 and i3 across three boundaries; the compiled parts are cached per batch size;
an IR whose attention the cut cannot take is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import ir_fixtures
import numpy as np
import pytest
from cli import run_cli
from test_ir_batching import DECODE_TOKENS, EXACT_F32, LADDER, PROMPTS, genai_batch_greedy

from compile_ahead.runtime.ladder.config import RunConfig
from compile_ahead.runtime.ladder.run_protocol import greedy
from compile_ahead.runtime.ladder.runner import run_ladder
from compile_ahead.runtime.ladder.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model

BOUNDARIES = [(16, 32), (32, 64), (64, 128)]
ONE = [PROMPTS[1]]  # B=1: 12 prompt tokens and 60 decoded cross all three boundaries
_expected: dict[tuple[Path, int], list[list[int]]] = {}


def _tokens(source, schedule: str, prompts: list[list[int]], graph: str) -> list[list[int]]:
    """Each sequence's greedy tokens on ``graph`` graphs (run_ladder, exact f32 math)."""
    protocols = tuple(greedy(p, DECODE_TOKENS) for p in prompts)
    batch = {"prompts": protocols} if len(prompts) > 1 else {}
    config = RunConfig(
        SCHEDULES[schedule], LADDER, protocols[0], options=EXACT_F32, graph=graph, **batch
    )
    result = run_ladder(source, config)
    assert result.error is None and result.completed, result.error
    assert result.report.graph == graph
    assert [(b.from_rung, b.to) for b in result.report.boundaries] == BOUNDARIES
    if len(prompts) > 1:
        return [s["tokens"] for s in result.sequences]
    return [[result.first_token, *result.predicted]]


def _whole(source, model_dir: Path, prompts: list[list[int]]) -> list[list[int]]:
    """The whole graphs' tokens, checked once against LLMPipeline's batched greedy."""
    key = (model_dir, len(prompts))
    if key not in _expected:
        whole = _tokens(source, "i2", prompts, "whole")
        assert whole == genai_batch_greedy(model_dir, prompts, DECODE_TOKENS + 1)
        _expected[key] = whole
    return _expected[key]


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["i2", "i3"])
@pytest.mark.parametrize("fmt", list(ir_fixtures.FORMATS))
def test_split_tokens_equal_whole_and_llmpipeline_per_sequence(ir_exports, fmt, schedule):
    model_dir = ir_exports[("qwen2", fmt)]
    source = resolve_model(str(model_dir))
    for prompts in (ONE, PROMPTS):
        assert _tokens(source, schedule, prompts, "split") == _whole(source, model_dir, prompts)


def _run(model_dir: Path, tmp_path: Path, name: str, prompts: list[list[int]]) -> dict:
    report = tmp_path / f"{name}.json"
    ids = [a for p in prompts for a in ("--prompt-ids", ",".join(map(str, p)))]
    proc = run_cli(
        *["run", "--model", model_dir, "--schedule", "i3", "--ladder", "16,32,64,128"],
        *["--graph", "split", "--inference-precision", "f32", "--kv-precision", "f32", *ids],
        *["--decode-tokens", DECODE_TOKENS, "--no-progress", "--report", report],
        *["--cache-dir", tmp_path / "cache"],
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(report.read_text())


@pytest.mark.slow
def test_run_graph_split_batch_4_on_an_ir_and_its_cached_parts(ir_exports, tmp_path):
    """`run --graph split --batch 4` on an IR gives LLMPipeline's batched greedy tokens per
    sequence; a second run imports every graph from the compile cache, and B=1 parts are
    other entries than B=4's."""
    model_dir = ir_exports[("qwen2", "fp16")]
    expected = genai_batch_greedy(model_dir, PROMPTS, DECODE_TOKENS + 1)
    cold = _run(model_dir, tmp_path, "cold", PROMPTS)
    assert cold["batch"] == 4 and cold["graph"] == "split"
    assert cold["model_format"] == "openvino-ir"
    for seq, tokens in zip(cold["sequences"], expected, strict=True):  # `run` stops at EOS
        assert seq["tokens"] == tokens[: len(seq["tokens"])]
        assert len(seq["tokens"]) == len(tokens) or seq["stop_reason"] == "eos"
    assert [(b["from"], b["to"]) for b in cold["boundaries"]] == BOUNDARIES
    parts = [j for j in cold["compile_jobs"] if j["capacity"] == 0]
    assert len(parts) == 1 and parts[0]["cache"] == "miss" and parts[0]["cache_stored"]
    warm = _run(model_dir, tmp_path, "warm", PROMPTS)
    assert {j["cache"] for j in warm["compile_jobs"]} == {"hit"}
    assert [s["tokens"] for s in warm["sequences"]] == [s["tokens"] for s in cold["sequences"]]
    one = _run(model_dir, tmp_path, "one", ONE)
    assert [j["cache"] for j in one["compile_jobs"] if j["capacity"] == 0] == ["miss"]


def _decoder_without_attention(tmp_path: Path) -> Path:
    """A one-layer stateful decoder with optimum's interface whose past K/V reach the logits
    without any attention: nothing for the split cut to cut at."""
    import openvino as ov
    from openvino import opset13 as ops
    from openvino.op.util import Variable, VariableInfo

    names = ("input_ids", "attention_mask", "position_ids")
    ids, mask, positions = (ops.parameter([-1, -1], ov.Type.i64, name=n) for n in names)
    beam = ops.parameter([-1], ov.Type.i32, name="beam_idx")
    hidden = ops.convert(ops.unsqueeze(ids, ops.constant(np.int64(-1))), ov.Type.f32)
    new = ops.broadcast(hidden, ops.constant(np.array([1, 2, 1, 4])))
    empty = ops.broadcast(ops.constant(np.float32(0)), ops.constant(np.array([1, 2, 0, 4])))
    total, sinks = hidden, []
    for kind in ("key", "value"):
        info = VariableInfo()
        info.data_shape = ov.PartialShape([-1, 2, -1, 4])
        info.data_type = ov.Type.f32
        info.variable_id = f"past_key_values.0.{kind}present.0.{kind}"
        var = Variable(info)
        past = ops.gather(ops.read_value(empty, var), beam, ops.constant(np.int64(0)))
        cat = ops.concat([past, new], 2)
        sinks.append(ops.assign(cat, var))
        total = ops.add(total, ops.reduce_sum(cat, ops.constant(np.array([0, 1, 2, 3])), False))
    vocab = ops.constant(np.ones((1, 1, 8), np.float32))
    logits = ops.result(ops.multiply(total, vocab))
    logits.output(0).get_tensor().set_names({"logits"})
    params = [ids, mask, positions, beam]
    for p in params:
        p.output(0).get_tensor().set_names({p.get_friendly_name()})
    model = ov.Model([logits], sinks, params, "no_attention")
    ov.save_model(model, str(tmp_path / "openvino_model.xml"), compress_to_fp16=False)
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 64}))
    return tmp_path


def test_split_graphs_of_an_ir_without_attention_are_refused(tmp_path):
    """One line, exit 2, before any rung is compiled or the report is written."""
    model_dir = _decoder_without_attention(tmp_path / "model")
    report = tmp_path / "run.json"
    report.write_text("an earlier report")
    proc = run_cli(
        *["run", "--model", model_dir, "--schedule", "i2", "--ladder", "16,32"],
        *["--graph", "split", "--prompt-ids", "1,2", "--no-progress", "--report", report],
        *["--cache-dir", tmp_path / "cache"],
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"compile-ahead: error: {model_dir / 'openvino_model.xml'}: --graph split cannot cut "
        "this IR: no attention over the cache of layers [0]; use --graph whole"
    )
    assert report.read_text() == "an earlier report"
