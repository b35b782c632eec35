"""A batch of sequences on optimum-intel IRs (FP16, INT8, INT4): rung graphs cut at static
[B, C] with per-sequence positions and masks. Each sequence's greedy tokens equal its own
batch-1 run on every schedule across boundaries, with ragged prompts and an EOS mid-run, and
at B=4 `run --batch 4` gives LLMPipeline's batched greedy tokens, per sequence."""

from __future__ import annotations

import json
from pathlib import Path

import ir_fixtures
import pytest
from cli import run_cli
from ir_batch_reference import DECODE_TOKENS, EXACT_F32, LADDER, PROMPTS, genai_batch_greedy

from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.ladder.runner import run_ladder
from compile_ahead.runtime.ladder.settings.config import RunConfig
from compile_ahead.runtime.ladder.settings.run_protocol import greedy
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model

pytestmark = pytest.mark.slow

EXPORTS = [(a, f) for a in ir_fixtures.ARCHITECTURES for f in ir_fixtures.FORMATS]
EOS_SEQUENCE = 2  # this one is given an EOS it generates mid-run
_alone: dict[tuple[Path, tuple], list[int]] = {}


def _batch1(source, model_dir: Path, protocol) -> list[int]:
    key = (model_dir, (tuple(protocol.prompt), protocol.decode_tokens, protocol.eos))
    if key not in _alone:
        config = RunConfig(SCHEDULES["i1"], LADDER, protocol, options=EXACT_F32)
        result = run_ladder(source, config)
        assert result.error is None and result.completed, result.error
        _alone[key] = [result.first_token, *result.predicted]
    return _alone[key]


def _eos_mid_run(tokens: list[int]) -> int:
    """A token first generated after the first boundary, to stop on."""
    for i in range(20, len(tokens) - 10):
        if tokens[i] not in tokens[:i]:
            return tokens[i]
    raise AssertionError(f"no token to stop on in {tokens}")


def _protocols(source, model_dir: Path) -> list:
    plain = [greedy(p, DECODE_TOKENS) for p in PROMPTS]
    eos = _eos_mid_run(_batch1(source, model_dir, plain[EOS_SEQUENCE]))
    plain[EOS_SEQUENCE] = greedy(PROMPTS[EOS_SEQUENCE], DECODE_TOKENS, (eos,))
    return plain


def _check_batch_equals_batch1(model_dir: Path, schedule: str) -> None:
    source = resolve_model(str(model_dir))
    protocols = _protocols(source, model_dir)
    alone = [_batch1(source, model_dir, p) for p in protocols]
    config = RunConfig(SCHEDULES[schedule], LADDER, tuple(protocols), options=EXACT_F32)
    result = run_ladder(source, config)
    assert result.error is None and result.completed, result.error
    assert [s["tokens"] for s in result.sequences] == alone, schedule
    stops = [s["stop_reason"] for s in result.sequences]
    assert stops[EOS_SEQUENCE] == "eos" and len(alone[EOS_SEQUENCE]) < DECODE_TOKENS + 1
    if schedule != "b0":  # b0 runs on the top rung only
        crossed = [(b.from_rung, b.to) for b in result.report.boundaries]
        assert crossed == [(16, 32), (32, 64), (64, 128)], crossed


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_each_sequence_equals_its_batch1_run_on_every_schedule(ir_exports, schedule):
    _check_batch_equals_batch1(ir_exports[("qwen2", "fp16")], schedule)


@pytest.mark.parametrize(("arch", "fmt"), EXPORTS, ids=[f"{a}-{f}" for a, f in EXPORTS])
def test_each_sequence_equals_its_batch1_run_per_format(ir_exports, arch, fmt):
    _check_batch_equals_batch1(ir_exports[(arch, fmt)], "i2")


def test_batched_rung_graph_interface(ir_exports):
    source = resolve_model(str(ir_exports[("llama", "int4")]))
    cfg = source.config
    model = source.build_graph(GraphSpec(32, 1, "f32", 128, batch=4))
    shapes = {p.get_any_name(): list(p.get_shape()) for p in model.inputs}
    assert shapes["past_key.0"] == [4, cfg.num_kv_heads, 128, cfg.head_dim]
    assert shapes["attention_mask"] == [4, 32 + 1]
    assert shapes["input_ids"] == shapes["position_ids"] == [4, 1]
    outputs = {p.get_any_name(): list(p.get_shape()) for p in model.outputs}
    assert outputs["new_key.1"] == [4, cfg.num_kv_heads, 1, cfg.head_dim]
    assert outputs["logits"] == [4, 1, cfg.vocab_size]
    # The batched decode graph still attends without the KV concat.
    assert "ScaledDotProductAttention" not in {op.get_type_name() for op in model.get_ops()}


@pytest.mark.parametrize("fmt", list(ir_fixtures.FORMATS))
def test_run_batch_4_equals_llmpipeline_batched_greedy(ir_exports, tmp_path, fmt):
    """`run --batch 4` on an IR: each sequence's tokens are LLMPipeline's batched greedy ones.
    FP16 goes through the command; the CLI has no flag for EXACT, which only matters for
    compressed weights, so INT8 and INT4 go through run_ladder with it."""
    model_dir = ir_exports[("qwen2", fmt)]
    expected = genai_batch_greedy(model_dir, PROMPTS, DECODE_TOKENS + 1)
    if fmt != "fp16":
        source = resolve_model(str(model_dir))
        protocols = tuple(greedy(p, DECODE_TOKENS) for p in PROMPTS)
        config = RunConfig(SCHEDULES["i3"], LADDER, tuple(protocols), options=EXACT_F32)
        result = run_ladder(source, config)
        assert result.error is None and result.completed, result.error
        assert [s["tokens"] for s in result.sequences] == expected
        return
    report = tmp_path / "run.json"
    ids = [a for p in PROMPTS for a in ("--prompt-ids", ",".join(map(str, p)))]
    proc = run_cli(
        *["run", "--model", model_dir, "--schedule", "i3", "--ladder", "16,32,64,128"],
        *["--inference-precision", "f32", "--kv-precision", "f32", "--batch", "4", *ids],
        *["--decode-tokens", DECODE_TOKENS, "--no-progress", "--report", report],
        *["--cache-dir", tmp_path / "cache"],
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(report.read_text())
    assert got["batch"] == 4 and got["model_format"] == "openvino-ir"
    for seq, tokens in zip(got["sequences"], expected, strict=True):  # `run` stops at EOS
        assert seq["tokens"] == tokens[: len(seq["tokens"])]
        assert len(seq["tokens"]) == len(tokens) or seq["stop_reason"] == "eos"
    assert [(b["from"], b["to"]) for b in got["boundaries"]] == [(16, 32), (32, 64), (64, 128)]


# Ragged prompts of 5, 17, 40 and 33 tokens: the longest takes the paged prefill graph (each
# sequence's prompt on it in turn, into its own row of the batch's KV), the first rung is 64.
LONG_PROMPTS = [
    [5, 17, 300, 44, 9],
    list(range(5, 22)),
    [(7 * i) % 509 + 1 for i in range(40)],
    [(11 * i) % 503 + 2 for i in range(33)],
]


def test_batch_4_prefilled_on_the_paged_graph_equals_llmpipeline(ir_exports):
    """B=4 whose prompts go through the paged prefill graph, one sequence at a time: each
    sequence's tokens are still LLMPipeline's batched greedy ones."""
    model_dir = ir_exports[("qwen2", "fp16")]
    expected = genai_batch_greedy(model_dir, LONG_PROMPTS, DECODE_TOKENS + 1)
    source = resolve_model(str(model_dir))
    protocols = tuple(greedy(p, DECODE_TOKENS) for p in LONG_PROMPTS)
    config = RunConfig(SCHEDULES["i3"], LADDER, tuple(protocols), options=EXACT_F32)
    result = run_ladder(source, config)
    assert result.error is None and result.completed, result.error
    assert result.report.prefill["path"] == "paged"
    assert [s["prompt_len"] for s in result.report.prefill["sequences"]] == [5, 17, 40, 33]
    assert [s["tokens"] for s in result.sequences] == expected
    assert [(b.from_rung, b.to) for b in result.report.boundaries] == [(64, 128)]
