"""The optimum-style stateful model reproduces transformers on plain CPU (dynamic shapes), with
the layout upstream pipelines expect and an attention the CPU plugin fuses with its KV cache."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest

from compile_ahead.runtime.baselines.cpu_dynamic import cpu_config
from compile_ahead.runtime.baselines.ir_round_trip import through_ir
from compile_ahead.runtime.baselines.stateful_runner import StatefulRunner
from compile_ahead.runtime.graphs import stateful
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import reference_greedy

PROMPT = [int(x) for x in np.random.default_rng(11).integers(3, 1000, size=19)]
STEPS = 20
# f32 arithmetic and an f32 KV cache (the CPU plugin's default KV cache is u8).
EXACT = cpu_config(inference_precision="f32", kv_cache_precision="f32")


@pytest.mark.parametrize("fixture", ["tiny_qwen2_dir", "tiny_llama_dir"])
def test_greedy_matches_transformers(fixture, request):
    model_dir = request.getfixturevalue(fixture)
    ref_tokens, ref_logits = reference_greedy(model_dir, PROMPT, STEPS)
    runner = StatefulRunner("cpu", resolve_model(str(model_dir)), "CPU", EXACT)
    ours = runner.run(PROMPT, STEPS - 1)
    assert ours.tokens == ref_tokens
    assert len(ours.logits) == STEPS
    worst = max(float(np.abs(a - b).max()) for a, b in zip(ours.logits, ref_logits, strict=True))
    assert worst < 1e-4


def test_teacher_forced_matches_one_transformers_forward(tiny_llama_dir):
    """Forced decode inputs give, step by step, the logits of one full-sequence forward."""
    import torch
    from transformers import AutoModelForCausalLM

    forced = [int(x) for x in np.random.default_rng(3).integers(3, 1000, size=12)]
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        full = model(torch.tensor([PROMPT + forced])).logits[0].numpy()
    expected = full[len(PROMPT) - 1 :]  # after the prompt, then after each forced token

    runner = StatefulRunner("cpu", resolve_model(str(tiny_llama_dir)), "CPU", EXACT)
    ours = runner.run(PROMPT, len(forced), forced=forced)
    assert len(ours.logits) == len(forced) + 1
    np.testing.assert_allclose(np.stack(ours.logits), expected, atol=1e-4, rtol=0)
    assert ours.tokens == [int(t) for t in expected.argmax(-1)]
    assert ours.step_context == list(range(len(PROMPT), len(PROMPT) + len(forced)))


def test_left_padded_batch_matches_single_sequences(tiny_qwen2_dir):
    """Padding slots (attention_mask 0) are invisible: a left-padded row of a batch decodes
    exactly like the same sequence alone. NPUW relies on this: it left-pads its prefill."""
    source = resolve_model(str(tiny_qwen2_dir))
    model = stateful.build_stateful_model(source.config, source.weights)
    compiled = ov.Core().compile_model(model, "CPU", EXACT)
    short, pad = PROMPT[:11], len(PROMPT) - 11
    steps = 4

    def single(prompt: list[int]) -> list[np.ndarray]:
        return StatefulRunner("cpu", source, "CPU", EXACT).run(prompt, steps).logits

    request = compiled.create_infer_request()
    ids = np.array([PROMPT, [0] * pad + short], np.int64)
    mask = np.array([[1] * len(PROMPT), [0] * pad + [1] * len(short)], np.int64)
    positions = np.array([range(len(PROMPT)), [0] * pad + list(range(len(short)))], np.int64)
    beam = np.arange(2, dtype=np.int32)
    rows: list[list[np.ndarray]] = [[], []]
    for _ in range(steps + 1):
        out = request.infer(
            {"input_ids": ids, "attention_mask": mask, "position_ids": positions, "beam_idx": beam}
        )["logits"][:, -1]
        for b in range(2):
            rows[b].append(out[b].copy())
        # Greedy continuation per row, one token per call.
        ids = out.argmax(-1)[:, None].astype(np.int64)
        mask = np.concatenate([mask, np.ones((2, 1), np.int64)], 1)
        positions = positions[:, -1:] + 1
    for b, prompt in enumerate([PROMPT, short]):
        for got, want in zip(rows[b], single(prompt), strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_layout_upstream_pipelines_expect(tiny_qwen2_dir):
    source = resolve_model(str(tiny_qwen2_dir))
    cfg = source.config
    model = stateful.build_stateful_model(cfg, source.weights, kv_precision="f16")
    assert [p.get_any_name() for p in model.inputs] == [
        "input_ids",
        "attention_mask",
        "position_ids",
        "beam_idx",
    ]
    assert [o.get_any_name() for o in model.outputs] == ["logits"]
    expected_ids = {
        f"past_key_values.{i}.{kind}present.{i}.{kind}"
        for i in range(cfg.num_layers)
        for kind in ("key", "value")
    }
    variables = {v.get_info().variable_id: v.get_info() for v in model.get_variables()}
    assert set(variables) == expected_ids
    for info in variables.values():
        assert info.data_type == ov.Type.f16
        assert info.data_shape == ov.PartialShape([-1, cfg.num_kv_heads, -1, cfg.head_dim])


def test_cpu_plugin_fuses_attention_with_the_kv_state(tiny_qwen2_dir):
    """Each state feeds the CPU plugin's fused attention directly (no KV concat, no beam
    gather left), the fast path the plain-CPU baseline must take to be a fair comparison."""
    source = resolve_model(str(tiny_qwen2_dir))
    model = stateful.build_stateful_model(source.config, source.weights)
    runtime = ov.Core().compile_model(model, "CPU", EXACT).get_runtime_model()

    def kind(node) -> str:
        return node.get_rt_info()["layerType"].astype(str)

    attention = [n for n in runtime.get_ops() if kind(n) == "ScaledDotProductAttention"]
    states = [n for n in runtime.get_ops() if kind(n) == "MemoryInput"]
    assert len(attention) == source.config.num_layers
    assert len(states) == 2 * source.config.num_layers
    for node in states:
        users = {kind(i.get_node()) for i in node.output(0).get_target_inputs()}
        assert users == {"ScaledDotProductAttention"}


def test_ir_round_trip_keeps_weights_compressed(tmp_path):
    """The decompression mark is lost by save_model; through_ir restores it on every weight,
    or the CPU plugin would fold the f16 weights to f32 (twice the memory)."""
    from compile_ahead.runtime.model.weights import expected_shapes

    source = resolve_model("tiny")  # synthetic f16 weights
    model = stateful.build_stateful_model(source.config, source.weights)
    reloaded = through_ir(model, tmp_path)
    marked = [
        op
        for op in reloaded.get_ops()
        if op.get_type_name() == "Convert" and "decompression_0" in op.get_rt_info()
    ]
    assert len(marked) == len(expected_shapes(source.config))
