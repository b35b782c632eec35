"""What the batching tests share: a sequence's batch-1 tokens to hold a batch to, and a token
to stop on mid-run."""

from __future__ import annotations

from compile_ahead.runtime.ladder.runner import run_ladder
from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import RunConfig
from compile_ahead.runtime.ladder.settings.run_protocol import RunProtocol
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from conftest import F32


def batch1_tokens(
    source, protocol: RunProtocol, ladder: Ladder, schedule: str = "i1", graph=None, options=F32
) -> list[int]:
    """``protocol`` run alone (batch 1, f32, whole or ``graph``): its first token and every
    decoded one. ``options``: F32, or F32 with a compile cache (conftest's f32_cached)."""
    config = RunConfig(SCHEDULES[schedule], ladder, protocol, options=options, graph=graph)
    result = run_ladder(source, config)
    assert result.error is None and result.completed, result.error
    return [result.first_token, *result.predicted]


def run_batch(source, protocols, ladder: Ladder, schedule: str, options=F32, **config):
    """``protocols`` as one batch (f32, or ``options``) on ``schedule``; the completed result."""
    run = RunConfig(SCHEDULES[schedule], ladder, tuple(protocols), options=options, **config)
    result = run_ladder(source, run)
    assert result.error is None and result.completed, result.error
    return result


def eos_mid_run(tokens: list[int]) -> int:
    """A token of ``tokens`` first generated from its 21st token on, to stop on."""
    for i in range(20, len(tokens) - 10):
        if tokens[i] not in tokens[:i]:
            return tokens[i]
    raise AssertionError(f"no token to stop on in {tokens}")
