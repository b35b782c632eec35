"""OpenVINO's NPU LLM pipeline (NPUW) run on CPU: the seed's B0 (generate pyramid off) and B1
(pyramid on) as OpenVINO ships them, on the stateful model of runtime/graphs/stateful.py.

NPUW turns that stateful model into static prefill and generate graphs itself (every pyramid
variant compiled inside compile_model), keeps the KV cache in f16 by default and reads the past
length from the attention mask's length. The functions below derive the sizes it compiles.
"""

from __future__ import annotations

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.precision import with_precisions
from compile_ahead.runtime.baselines.stateful_runner import BaselineResult, StatefulRunner
from compile_ahead.runtime.sources.base import ModelSource

# NPUW aligns both lengths up to a multiple of this (llm_compiled_model.cpp, align_to(.., 64)).
NPUW_ALIGN = 64
# Pyramid variants are 1024 + R, 2048 + R, ... up to the total KV size.
NPUW_PYRAMID_BASE = 1024
# NPUW_LLM_PREFILL_CHUNK_SIZE default (prefill hint DYNAMIC): a prompt capacity above it is
# aligned up to a multiple of it, so MAX_PROMPT_LEN 8128 holds 8192 prompt tokens.
NPUW_PREFILL_CHUNK = 1024


def _align(n: int, to: int = NPUW_ALIGN) -> int:
    return -(-n // to) * to


def npuw_prompt_capacity(max_prompt_len: int, prefill_chunk: int = NPUW_PREFILL_CHUNK) -> int:
    """The prompt length NPUW's prefill accepts for a given NPUW_LLM_MAX_PROMPT_LEN."""
    prompt = _align(max_prompt_len)
    if 0 < prefill_chunk < prompt:
        prompt = _align(prompt, prefill_chunk)
    return prompt


def npuw_kv_size(
    max_prompt_len: int, min_response_len: int, prefill_chunk: int = NPUW_PREFILL_CHUNK
) -> int:
    """Total KV slots of NPUW's largest generate graph (prompt capacity + aligned response).

    Measured on CPU: the context can grow to this size minus one (the generate graph's past
    input holds size - 1 slots, the new token the last), e.g. MAX_PROMPT_LEN 1100 with
    MIN_RESPONSE_LEN 64 stops at 2111 stored tokens.
    """
    return npuw_prompt_capacity(max_prompt_len, prefill_chunk) + _align(min_response_len)


def npuw_generate_sizes(
    max_prompt_len: int,
    min_response_len: int,
    pyramid: bool,
    prefill_chunk: int = NPUW_PREFILL_CHUNK,
) -> list[int]:
    """KV sizes of the generate graphs NPUW compiles, as its LLM compiled model derives them."""
    total = npuw_kv_size(max_prompt_len, min_response_len, prefill_chunk)
    if not pyramid:
        return [total]
    response = _align(min_response_len)
    sizes = []
    base = NPUW_PYRAMID_BASE
    while base + response <= total:
        sizes.append(base + response)
        base *= 2
    if not sizes or sizes[-1] < total:
        sizes.append(total)
    return sizes


def npuw_config(
    max_prompt_len: int,
    min_response_len: int,
    pyramid: bool,
    inference_precision: str | None = None,
    kv_cache_precision: str | None = None,
    extra: dict[str, object] | None = None,
) -> dict[str, object]:
    """compile_model properties for NPUW's LLM pipeline with CPU as its only device.

    inference_precision (e.g. "f32") reaches the CPU sub-compiles; None keeps the CPU default
    (bf16 on AMX). kv_cache_precision None keeps NPUW's default f16 KV cache. Everything else is
    NPUW's default LLM config, which is what the seed's baselines are.
    """
    cfg: dict[str, object] = {
        "NPU_USE_NPUW": "YES",
        "NPUW_DEVICES": "CPU",
        "NPUW_LLM": "YES",
        "NPUW_LLM_MAX_PROMPT_LEN": int(max_prompt_len),
        "NPUW_LLM_MIN_RESPONSE_LEN": int(min_response_len),
        "NPUW_LLM_GENERATE_PYRAMID": "YES" if pyramid else "NO",
    }
    return with_precisions(cfg, inference_precision, kv_cache_precision, extra)


def compile_npuw(
    source: ModelSource,
    max_prompt_len: int,
    min_response_len: int,
    pyramid: bool = True,
    inference_precision: str | None = None,
    kv_cache_precision: str | None = None,
    extra: dict[str, object] | None = None,
    via_ir: bool = True,
) -> StatefulRunner:
    """NPUW's LLM pipeline on CPU: B1 with pyramid=True, B0 with pyramid=False."""
    cfg = npuw_config(
        max_prompt_len, min_response_len, pyramid, inference_precision, kv_cache_precision, extra
    )
    name = "npuw-pyramid" if pyramid else "npuw"
    return StatefulRunner(name, source, "NPU", cfg, via_ir=via_ir)


def run_npuw(
    source: ModelSource,
    prompt_ids: list[int],
    max_new_tokens: int,
    pyramid: bool = True,
    max_prompt_len: int = 1024,
    min_response_len: int = 128,
    forced: list[int] | None = None,
    inference_precision: str | None = None,
    kv_cache_precision: str | None = None,
    keep_logits: bool = True,
) -> BaselineResult:
    """Compile (timed) and run once with NPUW's default prefill chunking.

    max_new_tokens counts decode steps after the prompt.
    """
    capacity = npuw_prompt_capacity(max_prompt_len)
    if len(prompt_ids) > capacity:
        raise CompileAheadError(
            f"the prompt ({len(prompt_ids)} tokens) exceeds NPUW's prompt capacity {capacity} "
            f"(NPUW_LLM_MAX_PROMPT_LEN {max_prompt_len})"
        )
    total = npuw_kv_size(max_prompt_len, min_response_len)
    if len(prompt_ids) + max_new_tokens > total - 1:
        raise CompileAheadError(
            f"prompt + {max_new_tokens} steps exceed NPUW's KV size {total} minus one "
            f"(MAX_PROMPT_LEN + MIN_RESPONSE_LEN after NPUW's alignment)"
        )
    runner = compile_npuw(
        source, max_prompt_len, min_response_len, pyramid, inference_precision, kv_cache_precision
    )
    return runner.run(prompt_ids, max_new_tokens, forced, keep_logits)
