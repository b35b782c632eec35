"""OpenVINO's NPU LLM pipeline (NPUW) on CPU runs our stateful model, against transformers.

Tolerance. With f32 arithmetic (INFERENCE_PRECISION_HINT f32) and f16 weights, NPUW on CPU still
differs from an f32 run in exactly one way we keep: its KV cache is stored in f16. Two other
defaults are switched off here because they are not about the KV cache: NPUW_F16IC (f16 tensors
between its partitions) and, by using an f16 checkpoint, its f32 -> f16 weight rounding. The
f16 KV cache is emulated in transformers (the past K/V are rounded to f16 when stored; a call's
own K/V stay f32, as in NPUW's prefill and generate graphs), and NPUW must match that emulation
to the same 1e-4 as our f32 graphs. Against the plain f32 reference the tolerance then follows
by the triangle inequality: tau = delta + 1e-4, delta = the measured effect of the f16 KV cache
on this model's logits. Greedy tokens must agree wherever the reference's top-2 margin exceeds
2 * tau (a margin above 2 * tau cannot be overturned by errors of at most tau per logit).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest

from compile_ahead.runtime.baselines.npuw import (
    compile_npuw,
    npuw_generate_sizes,
    npuw_kv_size,
    run_npuw,
)
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import reference_greedy

F32_TOL = 1e-4
PROMPT = [int(x) for x in np.random.default_rng(5).integers(3, 1000, size=23)]
STEPS = 20
NPUW_F32 = dict(inference_precision="f32", extra={"NPUW_F16IC": "NO"})


def _f16_copy(model_dir: Path, out: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.half().save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def f16_dirs(tiny_qwen2_dir, tiny_llama_dir, tmp_path_factory) -> dict[str, Path]:
    """The tiny checkpoints with f16 weights: the weights NPUW would compute with anyway."""
    return {
        "qwen2": _f16_copy(tiny_qwen2_dir, tmp_path_factory.mktemp("qwen2-f16")),
        "llama": _f16_copy(tiny_llama_dir, tmp_path_factory.mktemp("llama-f16")),
    }


@contextlib.contextmanager
def f16_past_kv():
    """transformers with an f16 KV cache: what is stored is rounded to f16; the K/V a call
    computes are used unrounded by that same call."""
    import torch
    from transformers import cache_utils

    original = cache_utils.DynamicLayer.update

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys = torch.cat([self.keys, key_states], dim=-2)
        values = torch.cat([self.values, value_states], dim=-2)
        self.keys = torch.cat([self.keys, key_states.half().float()], dim=-2)
        self.values = torch.cat([self.values, value_states.half().float()], dim=-2)
        return keys, values

    cache_utils.DynamicLayer.update = update
    try:
        yield
    finally:
        cache_utils.DynamicLayer.update = original


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))


def _top2_margin(logits: np.ndarray) -> float:
    top2 = np.sort(logits)[-2:]
    return float(top2[1] - top2[0])


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_npuw_matches_transformers_with_f16_kv(family, f16_dirs):
    model_dir = f16_dirs[family]
    ref_tokens, ref_logits = reference_greedy(model_dir, PROMPT, STEPS)
    with f16_past_kv():
        emu_tokens, emu_logits = reference_greedy(model_dir, PROMPT, STEPS)
    delta = _max_diff(emu_logits, ref_logits)
    assert delta > 0  # the emulation really rounds something

    runner = compile_npuw(resolve_model(str(model_dir)), 64, 64, False, **NPUW_F32)
    npuw = runner.run(PROMPT, STEPS - 1)
    assert len(npuw.logits) == STEPS

    # NPUW is the f16-KV model, computed in f32.
    assert _max_diff(npuw.logits, emu_logits) < F32_TOL
    assert npuw.tokens == emu_tokens

    # Against plain f32: within tau, and tokens agree wherever the margin is decisive. Once a
    # token differs the sequences diverge, so compare up to the first difference.
    tau = delta + F32_TOL
    for step, (got, want) in enumerate(zip(npuw.logits, ref_logits, strict=True)):
        assert float(np.abs(got - want).max()) < tau, f"step {step}"
        if npuw.tokens[step] != ref_tokens[step]:
            assert _top2_margin(want) <= 2 * tau, f"step {step}: a decisive token changed"
            break


def test_npuw_pyramid_switches_variants_without_error(f16_dirs):
    """Pyramid on: generate graphs for KV 1088 and 2112; decoding across 1088 moves from the
    first to the second and stays on the f16-KV reference."""
    model_dir = f16_dirs["qwen2"]
    assert npuw_generate_sizes(2048, 64, pyramid=True) == [1088, 2112]
    prompt = [int(x) for x in np.random.default_rng(9).integers(3, 1000, size=1075)]
    steps = 24  # contexts 1075 .. 1098: the switch happens at 1088
    with f16_past_kv():
        emu_tokens, emu_logits = reference_greedy(model_dir, prompt, steps)

    runner = compile_npuw(resolve_model(str(model_dir)), 2048, 64, True, **NPUW_F32)
    npuw = runner.run(prompt, steps - 1)
    assert npuw.step_context[0] < 1088 <= npuw.step_context[-1]
    assert npuw.tokens == emu_tokens
    assert _max_diff(npuw.logits, emu_logits) < F32_TOL


def test_npuw_as_shipped_runs_both_baselines(tiny_qwen2_dir):
    """B0 and B1 as OpenVINO ships them (CPU default precision, f16 KV, f16 inter-partition
    tensors): compile and decode with the properties asked for. Accuracy of that
    configuration is not asserted here; the f32 tests above pin the model and the feeding."""
    source = resolve_model(str(tiny_qwen2_dir))
    for pyramid in (False, True):
        runner = compile_npuw(source, 2048, 64, pyramid)
        assert runner.compiled.get_property("NPUW_LLM_GENERATE_PYRAMID") == pyramid
        result = runner.run(PROMPT, 6)
        assert len(result.tokens) == 7 and len(result.step_times_s) == 6
        assert all(np.isfinite(row).all() for row in result.logits)
        # The kernel's RSS counters are summed from per-thread (per-CPU) deltas, so two reads
        # can disagree by a few dozen pages whatever happened in between.
        slack = 4 << 20
        assert result.compile_s > 0
        assert result.peak_rss_bytes + slack >= result.rss_after_compile_bytes


def test_run_npuw_refuses_what_does_not_fit(tiny_qwen2_dir):
    from compile_ahead.errors import CompileAheadError

    source = resolve_model(str(tiny_qwen2_dir))
    with pytest.raises(CompileAheadError, match="prompt capacity 64"):
        run_npuw(source, [1] * 65, 4, max_prompt_len=64, min_response_len=64)
    with pytest.raises(CompileAheadError, match="KV size 128"):
        run_npuw(source, [1] * 60, 68, max_prompt_len=64, min_response_len=64)


def test_generate_sizes_follow_npuw_rule():
    # The prompt capacity is aligned to 64, then (above one prefill chunk) to the chunk: 8128
    # holds 8192, so the KV is 8192 + 64. Pyramid: 1K+R, 2K+R, 4K+R, then the total.
    assert npuw_generate_sizes(8128, 64, pyramid=True) == [1088, 2112, 4160, 8256]
    assert npuw_generate_sizes(8128, 64, pyramid=False) == [8256]
    assert npuw_generate_sizes(8128, 64, False, prefill_chunk=0) == [8192]
    assert npuw_generate_sizes(100, 10, pyramid=True) == [192]


def test_kv_size_is_what_npuw_enforces(f16_dirs):
    """MAX_PROMPT_LEN 1100 (chunk-aligned to 2048) + 64: the context can reach 2111 tokens,
    and the next token is refused, as npuw_kv_size says."""
    source = resolve_model(str(f16_dirs["qwen2"]))
    assert npuw_kv_size(1100, 64) == 2112
    runner = compile_npuw(source, 1100, 64, pyramid=False)
    prompt = [int(x) for x in np.random.default_rng(2).integers(3, 1000, size=1100)]
    runner.run(prompt, 2111 - 1100, keep_logits=False)
    with pytest.raises(RuntimeError, match="KV-Cache is full"):
        runner.run(prompt, 2112 - 1100, keep_logits=False)
