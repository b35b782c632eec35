"""Greedy generation on one static capacity (`generate`): a b0 run of the ladder runtime on
one rung that holds the prompt and every token to generate (config.FittedRung), so generation
takes the runner's one first-rung and prefill path. The prompt's last logits give the first
token; each decode step gives the next."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from compile_ahead.runtime.compile.cache import CacheOutcome
from compile_ahead.runtime.ladder.config import RunConfig, SettledRun
from compile_ahead.runtime.ladder.reporting.events import RunEvents
from compile_ahead.runtime.ladder.reporting.report import RunReport
from compile_ahead.runtime.ladder.runner import run_ladder
from compile_ahead.runtime.sources.base import ModelSource

# The run's stop reasons as generation names them.
STOP_REASONS = {"completed": "max_new_tokens", "eos": "eos"}


@dataclass
class Generation:
    tokens: list[int]  # generated ids (not the prompt)
    report: RunReport  # the run's: first token, its parts, prefill, compile jobs
    # What the compile cache did with each graph (hit, miss stored or not, off), by name.
    cache: dict[str, CacheOutcome] = field(default_factory=dict)
    logits: list[np.ndarray] = field(default_factory=list)  # per token, when keep_logits
    stop_reason: str = "max_new_tokens"  # or eos, or capacity


def generate(
    source: ModelSource, config: RunConfig | SettledRun, events: RunEvents | None = None
) -> Generation:
    """Run ``config`` (greedy, one rung) and return what it generated. An interrupted run
    raises KeyboardInterrupt, a failed one its error: a generation is whole or not at all."""
    result = run_ladder(source, config, events)
    if result.report.interrupted:
        raise KeyboardInterrupt
    if result.error is not None:
        raise result.error
    assert result.first_token is not None
    stop = STOP_REASONS.get(result.report.stop_reason, "capacity")
    by_graph = {("prefill" if j.chunk > 1 else "decode"): j.cache for j in result.jobs if j.ok}
    cache: dict[str, CacheOutcome] = {
        name: by_graph[name] for name in ("decode", "prefill") if name in by_graph
    }
    logits = [result.first_logits, *result.logits] if result.first_logits is not None else []
    tokens = [result.first_token, *result.predicted]
    return Generation(tokens, result.report, cache, logits, stop)
