"""The serving engine's face to its callers (the HTTP endpoint, the replay command).

A caller submits greedy requests as token ids and receives one ``TokenEvent`` per generated
token and a last one with ``finished`` set, from the engine's own thread. Everything here is
what the endpoint may import (the events and settings are defined in ``events``); the engine
behind it lives in the other modules of ``runtime.serving``, started by ``start_engine``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from compile_ahead.runtime.serving.events import (
    FINISH_REASONS,
    FINISHED_CANCELLED,
    FINISHED_EOS,
    FINISHED_ERROR,
    FINISHED_LENGTH,
    FINISHED_REFUSED,
    ServingSettings,
    TokenEvent,
)

__all__ = [
    "FINISHED_CANCELLED",
    "FINISHED_EOS",
    "FINISHED_ERROR",
    "FINISHED_LENGTH",
    "FINISHED_REFUSED",
    "FINISH_REASONS",
    "Engine",
    "ServingSettings",
    "TokenEvent",
    "start_engine",
]


class Engine(Protocol):
    """A running serving engine. Every method may be called from any thread."""

    def submit(
        self,
        request_id: str,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        on_event: Callable[[TokenEvent], None],
    ) -> None:
        """Queues a greedy request. on_event is called from the engine's own thread, once per
        generated token (the first token included) and once more with finished set. A request
        the engine cannot take (prompt + max_new_tokens beyond the top capacity, empty prompt,
        engine draining) gets one event finished="refused" at once."""
        ...

    def cancel(self, request_id: str) -> None:
        """Frees the request's row at the next step; its last event is finished="cancelled".
        Unknown ids are ignored."""
        ...

    def status(self) -> dict[str, Any]:
        """JSON-able: {"ready": bool, "buckets": {"compiled": [[B, C], ...],
        "compiling": [[B, C], ...]}, "queued": int, "running": int, "policy": str,
        "error": str | None (why the engine stopped, when it failed)}"""
        ...

    def metrics(self) -> dict[str, Any]:
        """JSON-able serving metrics so far (TTFT/TPOT/ITL/E2E percentiles in seconds,
        throughput, compile seconds on the request path and in the background, buckets
        compiled/used, peak RSS)."""
        ...

    def drain(self, timeout_s: float) -> None:
        """Stops taking requests (new submits are refused), finishes or cancels in-flight ones
        within timeout_s, then stops the engine thread."""
        ...

    @property
    def eos_token_id(self) -> int | None: ...

    @property
    def max_context(self) -> int:
        """The top capacity: prompt + new tokens must fit."""
        ...


def start_engine(source: Any, settings: ServingSettings) -> Engine:
    """Starts an engine on ``source`` (a resolved model source) and its thread, and returns at
    once; ``status()["ready"]`` turns true when its policy has a bucket to serve from. Bad
    settings are refused in one line (CompileAheadError)."""
    # Imported here: the engine's modules import this package's events, never this module.
    from compile_ahead.runtime.serving.engine_thread import start_engine as start

    return start(source, settings)
