"""Greedy generation on one static capacity (`generate`): a b0 run of the ladder runtime on
one rung that holds the prompt and every token to generate (config.FittedRung), so generation
takes the runner's one first-rung and prefill path. The prompt's last logits give the first
token; each decode step gives the next."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from compile_ahead.runtime.compile.cache.outcome import CacheOutcome
from compile_ahead.runtime.ladder.reporting.events import RunEvents
from compile_ahead.runtime.ladder.reporting.report import RunReport
from compile_ahead.runtime.ladder.reporting.run_report import RunResult
from compile_ahead.runtime.ladder.runner import run_ladder
from compile_ahead.runtime.ladder.settings.config import RunConfig, SettledRun
from compile_ahead.runtime.sources.base import ModelSource

# The run's and a batch sequence's stop reasons as generation names them; anything else is
# the rung's capacity (the top rung or the model's maximum context).
STOP_REASONS = {"completed": "max_new_tokens", "token limit": "max_new_tokens", "eos": "eos"}


@dataclass
class GeneratedSequence:
    prompt_tokens: int
    tokens: list[int]  # generated ids (not the prompt)
    stop_reason: str  # max_new_tokens, eos or capacity
    logits: list[np.ndarray] = field(default_factory=list)  # per token, when keep_logits


@dataclass
class Generation:
    sequences: list[GeneratedSequence]  # one per sequence of the batch, B = 1 included
    report: RunReport  # the run's: first token, its parts, prefill, compile jobs
    # What the compile cache did with each graph (hit, miss stored or not, off), by name.
    cache: dict[str, CacheOutcome] = field(default_factory=dict)

    @property
    def tokens(self) -> list[int]:
        """The first (at B = 1 the only) sequence's generated ids."""
        return self.sequences[0].tokens

    @property
    def stop_reason(self) -> str:
        return self.sequences[0].stop_reason

    @property
    def logits(self) -> list[np.ndarray]:
        return self.sequences[0].logits


def generate(
    source: ModelSource, config: RunConfig | SettledRun, events: RunEvents | None = None
) -> Generation:
    """Run ``config`` (greedy, one rung, any B) and return what it generated. An interrupted
    run raises KeyboardInterrupt, a failed one its error: a generation is whole or not at
    all."""
    result = run_ladder(source, config, events)
    if result.report.interrupted:
        raise KeyboardInterrupt
    if result.error is not None:
        raise result.error
    by_graph = {("prefill" if j.chunk > 1 else "decode"): j.cache for j in result.jobs if j.ok}
    cache: dict[str, CacheOutcome] = {
        name: by_graph[name] for name in ("decode", "prefill") if name in by_graph
    }
    return Generation(_sequences(result), result.report, cache)


def _sequences(result: RunResult) -> list[GeneratedSequence]:
    if result.sequences:  # a batch: each sequence's own tokens and stop
        kept = result.sequence_logits or [[] for _ in result.sequences]
        return [
            GeneratedSequence(s["prompt_len"], s["tokens"], _stop(s["stop_reason"]), logits)
            for s, logits in zip(result.sequences, kept, strict=True)
        ]
    assert result.first_token is not None
    logits = [result.first_logits, *result.logits] if result.first_logits is not None else []
    tokens = [result.first_token, *result.predicted]
    prompt = result.report.prompt_len
    return [GeneratedSequence(prompt, tokens, _stop(result.report.stop_reason), logits)]


def _stop(reason: str) -> str:
    return STOP_REASONS.get(reason, "capacity")
