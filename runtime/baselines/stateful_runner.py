"""Run the stateful model (runtime/graphs/stateful.py) the way optimum / OpenVINO GenAI feed it.

The whole prompt in one call (input_ids, attention_mask of ones, position_ids 0..P-1), then one
call per token with an attention_mask covering the past plus the new token. The upstream
baselines (runtime/baselines/npuw.py, runtime/cpu_dynamic.py) are this runner with their device
config.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.measure import peak_rss_bytes, rss_bytes
from compile_ahead.runtime.base.ov_core import compile_model
from compile_ahead.runtime.baselines.ir_round_trip import through_ir
from compile_ahead.runtime.graphs.stateful import (
    ATTENTION_MASK,
    BEAM_IDX,
    INPUT_IDS,
    LOGITS,
    POSITION_IDS,
    build_stateful_model,
)
from compile_ahead.runtime.model.weights import expected_shapes
from compile_ahead.runtime.sources.base import ModelSource


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
            source.weights.load(weight)
        t1 = time.perf_counter()
        model = build_stateful_model(source.config, source.weights, kv_precision)
        t2 = time.perf_counter()
        if self._ir_dir is not None:
            model = through_ir(model, Path(self._ir_dir.name))
        t3 = time.perf_counter()
        self.rss_before_compile = rss_bytes()
        self.compiled = compile_model(model, device, self.config, f"the {name} stateful model")
        self.compile_s = time.perf_counter() - t3
        self.weights_s, self.build_s, self.ir_round_trip_s = t1 - t0, t2 - t1, t3 - t2
        self.rss_after_compile = rss_bytes()
        self.request = self.compiled.create_infer_request()
        self._beam = np.zeros(1, np.int32)
        self._context = 0  # tokens in the KV cache of the current sequence

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
