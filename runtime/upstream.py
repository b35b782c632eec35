"""Upstream baselines on the stateful model: plain CPU with dynamic shapes, and OpenVINO's NPU
LLM pipeline (NPUW) run on CPU with the generate pyramid off (seed B0) or on (seed B1).

Both run the model of runtime/stateful.py, built from the same weight store as our static
graphs, and feed it the way optimum / OpenVINO GenAI do: the whole prompt in one call
(input_ids, attention_mask of ones, position_ids 0..P-1), then one call per token with an
attention_mask covering the past plus the new token. NPUW turns that stateful model into static
prefill and generate graphs itself (every pyramid variant compiled inside compile_model), keeps
the KV cache in f16 by default and reads the past length from the attention mask's length.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import openvino as ov

from compile_ahead.errors import CompileAheadError

from .accounting import peak_rss_bytes, rss_bytes
from .compiler import core, openvino_error_summary
from .graphs import DECOMPRESSION_KEY
from .precision import OV_TYPES, check_precision
from .sources import ModelSource
from .stateful import (
    ATTENTION_MASK,
    BEAM_IDX,
    INPUT_IDS,
    LOGITS,
    POSITION_IDS,
    build_stateful_model,
)
from .weights import expected_shapes

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
    return _with_precisions(cfg, inference_precision, kv_cache_precision, extra)


def _with_precisions(
    cfg: dict[str, object],
    inference_precision: str | None,
    kv_cache_precision: str | None,
    extra: dict[str, object] | None,
) -> dict[str, object]:
    if inference_precision is not None:
        cfg["INFERENCE_PRECISION_HINT"] = OV_TYPES[check_precision(inference_precision, "hint")]
    if kv_cache_precision is not None:
        cfg["KV_CACHE_PRECISION"] = OV_TYPES[check_precision(kv_cache_precision, "KV")]
    cfg.update(extra or {})
    return cfg


def cpu_config(
    inference_precision: str | None = None,
    kv_cache_precision: str | None = None,
    extra: dict[str, object] | None = None,
) -> dict[str, object]:
    """compile_model properties for the plain-CPU dynamic-shape run (LATENCY, as a chat app)."""
    return _with_precisions(
        {"PERFORMANCE_HINT": "LATENCY"}, inference_precision, kv_cache_precision, extra
    )


@dataclass
class BaselineResult:
    """One run: tokens, optional logits, and where the time went."""

    name: str
    prompt_len: int
    tokens: list[int]  # the greedy (argmax) token after the prompt and after each decode step
    logits: list[np.ndarray]  # matching f32 [vocab] rows, if kept
    compile_s: float  # compile_model wall time (for NPUW: every variant, up front)
    build_s: float  # building the ov.Model on the host (weights already materialized)
    prefill_s: float
    step_times_s: list[float] = field(default_factory=list)  # decode step i wall time
    # Context length (tokens already in the KV cache) when decode step i ran.
    step_context: list[int] = field(default_factory=list)
    rss_before_compile_bytes: int = 0  # after building the model (and the IR round trip)
    rss_after_compile_bytes: int = 0
    peak_rss_bytes: int = 0  # process peak so far, so it includes anything run before
    config: dict[str, object] = field(default_factory=dict)
    weights_s: float = 0.0  # materializing the weight store (synthetic draws), not OpenVINO's
    ir_round_trip_s: float = 0.0  # save_model + read_model, when compiled via an IR

    def ms_per_token(self, lo: int, hi: int) -> float | None:
        """Mean decode step time for steps whose context is in [lo, hi), or None if none."""
        times = [
            t for t, c in zip(self.step_times_s, self.step_context, strict=True) if lo <= c < hi
        ]
        return 1e3 * float(np.mean(times)) if times else None

    def summary(self) -> dict[str, object]:
        """JSON-ready numbers (no tokens or logits)."""
        return {
            "name": self.name,
            "prompt_len": self.prompt_len,
            "decode_steps": len(self.step_times_s),
            "weights_s": self.weights_s,
            "build_s": self.build_s,
            "ir_round_trip_s": self.ir_round_trip_s,
            "compile_s": self.compile_s,
            "prefill_s": self.prefill_s,
            "decode_ms_per_token": 1e3 * float(np.mean(self.step_times_s))
            if self.step_times_s
            else None,
            "rss_before_compile_bytes": self.rss_before_compile_bytes,
            "rss_after_compile_bytes": self.rss_after_compile_bytes,
            "peak_rss_bytes": self.peak_rss_bytes,
            "config": {k: str(v) for k, v in self.config.items()},
        }


def _mark_decompression(model: ov.Model) -> int:
    """Re-mark f16/bf16 weight Converts as decompression after an IR round trip (the mark is
    not saved, and without it the CPU plugin folds the weights to f32)."""
    marked = 0
    for op in model.get_ops():
        if op.get_type_name() != "Convert":
            continue
        source = op.input_value(0)
        if source.get_node().get_type_name() == "Constant" and source.get_element_type() in (
            ov.Type.f16,
            ov.Type.bf16,
        ):
            op.get_rt_info()[DECOMPRESSION_KEY] = ""
            marked += 1
    return marked


def through_ir(model: ov.Model, directory: Path) -> ov.Model:
    """Save the model as IR and read it back: its weights become a memory-mapped file.

    That is how users hand OpenVINO an LLM (an optimum export on disk), and NPUW depends on it:
    for qwen2.5-0.5b (B0) it compiled in 4.6 s and held 3.1 GB RSS from an IR, against 9.3-10.6 s
    and 5.2 GB from the same model with in-memory (numpy-backed) constants.
    """
    path = directory / "stateful_model.xml"
    ov.save_model(model, path, compress_to_fp16=False)
    reloaded = core().read_model(path)
    _mark_decompression(reloaded)
    return reloaded


class StatefulRunner:
    """A compiled stateful model and one infer request, fed one sequence at a time.

    With via_ir (the default) the model is compiled from an IR in a temporary directory the
    runner keeps; without it, from in-memory constants aliasing the source's weight store.
    Timings: weights_s materializes the weight store (synthetic draws or page-ins; not an
    OpenVINO cost), build_s builds the ov.Model, ir_round_trip_s saves and re-reads it (zero
    without via_ir), compile_s is compile_model alone.
    """

    def __init__(
        self,
        name: str,
        source: ModelSource,
        device: str,
        config: dict[str, object],
        kv_precision: str = "f32",
        via_ir: bool = True,
    ):
        self.name = name
        self.source = source  # the in-memory model's constants alias its weight store
        self.config = dict(config)
        self._ir_dir = tempfile.TemporaryDirectory(prefix="stateful-ir-") if via_ir else None
        t0 = time.perf_counter()
        for weight in expected_shapes(source.config):
            source.weights.get(weight)
        t1 = time.perf_counter()
        model = build_stateful_model(source.config, source.weights, kv_precision)
        t2 = time.perf_counter()
        if self._ir_dir is not None:
            model = through_ir(model, Path(self._ir_dir.name))
        t3 = time.perf_counter()
        self.rss_before_compile = rss_bytes()
        try:
            self.compiled = core().compile_model(model, device, self.config)
        except RuntimeError as err:
            first = openvino_error_summary(err)
            raise CompileAheadError(f"{name}: compile_model on {device} failed: {first}") from err
        self.compile_s = time.perf_counter() - t3
        self.weights_s, self.build_s, self.ir_round_trip_s = t1 - t0, t2 - t1, t3 - t2
        self.rss_after_compile = rss_bytes()
        self.request = self.compiled.create_infer_request()
        self._beam = np.zeros(1, np.int32)
        self._context = 0

    @property
    def context(self) -> int:
        """Tokens in the KV cache of the current sequence."""
        return self._context

    def _infer(self, ids: list[int]) -> np.ndarray:
        past, n = self._context, len(ids)
        self.request.infer(
            {
                INPUT_IDS: np.asarray([ids], np.int64),
                ATTENTION_MASK: np.ones((1, past + n), np.int64),
                POSITION_IDS: np.arange(past, past + n, dtype=np.int64)[None],
                BEAM_IDX: self._beam,
            }
        )
        self._context += n
        # The plugin reuses the output buffer: copy the last row out before the next call.
        return np.array(self.request.get_tensor(LOGITS).data[0, -1], np.float32)

    def prefill(self, prompt: list[int]) -> np.ndarray:
        """Start a new sequence with the whole prompt in one call; the last row's logits."""
        if not prompt:
            raise CompileAheadError("the prompt is empty")
        # A fresh request is the one reset both plugins honour (NPUW keeps its own KV and
        # first-position bookkeeping outside the variable states).
        self.request = self.compiled.create_infer_request()
        self._context = 0
        return self._infer(list(prompt))

    def step(self, token: int) -> np.ndarray:
        """Append one token to the current sequence; its logits. Untimed: time around it."""
        if self._context == 0:
            raise CompileAheadError("step() before prefill()")
        return self._infer([int(token)])

    def run(
        self,
        prompt: list[int],
        decode_tokens: int,
        forced: list[int] | None = None,
        keep_logits: bool = True,
    ) -> BaselineResult:
        """Prefill the prompt, then decode_tokens steps.

        Greedy by default (each step feeds the previous argmax); with `forced`, step i feeds
        forced[i] (the teacher-forced protocol) and `tokens` still records the argmaxes.
        tokens/logits have decode_tokens + 1 entries: after the prompt and after each step.
        """
        if forced is not None and len(forced) < decode_tokens:
            raise CompileAheadError(f"{len(forced)} forced tokens for {decode_tokens} steps")
        t0 = time.perf_counter()
        logits = self.prefill(prompt)
        prefill_s = time.perf_counter() - t0
        result = BaselineResult(
            self.name,
            len(prompt),
            [int(np.argmax(logits))],
            [logits] if keep_logits else [],
            self.compile_s,
            self.build_s,
            prefill_s,
            rss_before_compile_bytes=self.rss_before_compile,
            rss_after_compile_bytes=self.rss_after_compile,
            config=self.config,
            weights_s=self.weights_s,
            ir_round_trip_s=self.ir_round_trip_s,
        )
        for i in range(decode_tokens):
            token = forced[i] if forced is not None else result.tokens[-1]
            context = self._context
            t0 = time.perf_counter()
            logits = self.step(token)
            result.step_times_s.append(time.perf_counter() - t0)
            result.step_context.append(context)
            result.tokens.append(int(np.argmax(logits)))
            if keep_logits:
                result.logits.append(logits)
        result.peak_rss_bytes = peak_rss_bytes()
        return result


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


def compile_dynamic_cpu(
    source: ModelSource,
    inference_precision: str | None = None,
    kv_cache_precision: str | None = None,
    extra: dict[str, object] | None = None,
    via_ir: bool = True,
) -> StatefulRunner:
    """The stateful model on the CPU plugin, dynamic shapes, fused stateful attention.

    kv_cache_precision None keeps the plugin's default cache (u8 on this CPU); pass "bf16" to
    compare with graphs whose KV is bf16, "f32" for exact checks.
    """
    cfg = cpu_config(inference_precision, kv_cache_precision, extra)
    return StatefulRunner("cpu-dynamic", source, "CPU", cfg, via_ir=via_ir)


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


def run_dynamic_cpu(
    source: ModelSource,
    prompt_ids: list[int],
    max_new_tokens: int,
    forced: list[int] | None = None,
    inference_precision: str | None = None,
    kv_cache_precision: str | None = None,
    keep_logits: bool = True,
) -> BaselineResult:
    runner = compile_dynamic_cpu(source, inference_precision, kv_cache_precision)
    return runner.run(prompt_ids, max_new_tokens, forced, keep_logits)
