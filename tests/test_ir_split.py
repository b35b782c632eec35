"""Split graphs (--graph split) of optimum-intel IRs (FP16, INT8, INT4): weight parts cut at the
IR's attentions, compiled once, and a weightless attention core per rung. Each sequence's
greedy tokens equal the whole graphs' and LLMPipeline's, at B=1 and at B=4 with ragged
prompts, on i2 and i3 across three boundaries; the compiled parts are cached per batch size;
an IR whose attention the cut cannot take is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import ir_fixtures
import pytest
from cli import run_cli
from ir_batch_reference import DECODE_TOKENS, EXACT_F32, LADDER, PROMPTS, genai_batch_greedy
from toy_decoder import toy_decoder_ir

from compile_ahead.runtime.ladder.runner import run_ladder
from compile_ahead.runtime.ladder.settings.config import RunConfig
from compile_ahead.runtime.ladder.settings.run_protocol import greedy
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model

BOUNDARIES = [(16, 32), (32, 64), (64, 128)]
ONE = [PROMPTS[1]]  # B=1: 12 prompt tokens and 60 decoded cross all three boundaries
_expected: dict[tuple[Path, int], list[list[int]]] = {}


def _tokens(source, schedule: str, prompts: list[list[int]], graph: str) -> list[list[int]]:
    """Each sequence's greedy tokens on ``graph`` graphs (run_ladder, exact f32 math)."""
    protocols = tuple(greedy(p, DECODE_TOKENS) for p in prompts)
    config = RunConfig(SCHEDULES[schedule], LADDER, protocols, options=EXACT_F32, graph=graph)
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


def test_split_graphs_of_an_ir_without_attention_are_refused(tmp_path):
    """A decoder whose KV cache reaches the logits through no attention has nothing to cut
    at: one line, exit 2, before any rung is compiled or the report is written."""
    model_dir = tmp_path / "model"
    toy_decoder_ir(model_dir)
    (model_dir / "config.json").write_text(json.dumps({"max_position_embeddings": 64}))
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
