"""Our static graphs reproduce transformers (f32 hint) through chunked prefill and decode."""

from __future__ import annotations

import numpy as np
import pytest

from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import generate_on, reference_greedy

PROMPT = [int(x) for x in np.random.default_rng(7).integers(3, 1000, size=21)]
STEPS = 16


@pytest.mark.parametrize("fixture", ["tiny_qwen2_dir", "tiny_llama_dir"])
def test_greedy_matches_transformers(fixture, request):
    model_dir = request.getfixturevalue(fixture)
    ref_tokens, ref_logits = reference_greedy(model_dir, PROMPT, STEPS)
    # Chunk 8 splits the 21-token prompt into 3 chunks, the last one padded.
    source = resolve_model(str(model_dir))
    ours = generate_on(source, 64, PROMPT, STEPS, prefill_chunk=8, prefill_shape="static")
    assert ours.tokens == ref_tokens
    assert len(ours.logits) == STEPS
    worst = max(float(np.abs(a - b).max()) for a, b in zip(ours.logits, ref_logits, strict=True))
    assert worst < 1e-4


def test_same_context_same_logits_across_capacities(tiny_qwen2_dir):
    source = resolve_model(str(tiny_qwen2_dir))
    runs = []
    for capacity in (32, 64, 128):
        runs.append(
            generate_on(source, capacity, PROMPT, 8, prefill_chunk=4, prefill_shape="static")
        )
    for other in runs[1:]:
        assert other.tokens == runs[0].tokens
        for a, b in zip(other.logits, runs[0].logits, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_prefill_chunk_size_does_not_change_results(tiny_llama_dir):
    source = resolve_model(str(tiny_llama_dir))
    one_by_one = generate_on(source, 64, PROMPT, 4, prefill_chunk=1)
    chunked = generate_on(source, 64, PROMPT, 4, prefill_chunk=16, prefill_shape="static")
    assert chunked.tokens == one_by_one.tokens
    for a, b in zip(chunked.logits, one_by_one.logits, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kv", ["f16", "bf16"])
def test_compressed_kv_stays_close(tiny_qwen2_dir, kv):
    """A lower-precision KV cache perturbs logits by about its rounding error, no more."""
    source = resolve_model(str(tiny_qwen2_dir))
    static = {"prefill_chunk": 16, "prefill_shape": "static"}
    exact = generate_on(source, 64, PROMPT, 8, **static)
    options = CompileOptions(device="CPU", inference_precision="f32", kv_precision=kv)
    rounded = generate_on(source, 64, PROMPT, 8, options, **static)
    # Relative rounding: f16 2^-11, bf16 2^-8; logits here are O(1).
    bound = {"f16": 5e-3, "bf16": 5e-2}[kv]
    worst = max(
        float(np.abs(a - b).max()) for a, b in zip(rounded.logits, exact.logits, strict=True)
    )
    assert 0 < worst < bound
