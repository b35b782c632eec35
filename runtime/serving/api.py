"""The serving engine's face to its callers (the HTTP endpoint, the replay command).

A caller submits greedy requests as token ids and receives one ``TokenEvent`` per generated
token and a last one with ``finished`` set, from the engine's own thread. Everything here is
what the endpoint may import; the engine behind it lives in the other modules of
``runtime.serving`` and is started by ``start_engine`` (``engine_thread``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# The ways a request ends (TokenEvent.finished).
FINISHED_EOS = "eos"
FINISHED_LENGTH = "length"
FINISHED_CANCELLED = "cancelled"
FINISHED_REFUSED = "refused"
FINISHED_ERROR = "error"
FINISH_REASONS = (
    FINISHED_EOS,
    FINISHED_LENGTH,
    FINISHED_CANCELLED,
    FINISHED_REFUSED,
    FINISHED_ERROR,
)


@dataclass(frozen=True)
class TokenEvent:
    """One event of a request: a new token, or (token None) its end and why."""

    request_id: str
    token: int | None  # a new token id; None on the final event
    finished: str | None  # None while running; else one of FINISH_REASONS
    message: str | None = None  # why, for "refused" / "error" (one line)


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
        "compiling": [[B, C], ...]}, "queued": int, "running": int, "policy": str}"""
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


@dataclass(frozen=True)
class ServingSettings:
    """How an engine is built: its grid (batch sizes x capacities), its compile policy, the
    memory its compiled buckets may hold, and how its graphs compile."""

    batch_sizes: tuple[int, ...] = (1, 2, 4)
    capacities: tuple[int, ...] = ()  # the capacity ladder; () = the source's default ladder
    policy: str = "ahead"  # "up-front" | "on-demand" | "ahead" (runtime.serving.policies)
    memory_budget_bytes: int | None = None  # None: no budget beyond the host's memory
    # "options": a CompileOptions (device, precision hints, compile cache), or its fields by
    # name instead; "kv": "reserve" (one top reservation, default) or "copy"; "stop_at_eos":
    # whether the model's EOS ids end a request (default False: max_new_tokens does).
    compile_options: dict[str, Any] | None = None


def start_engine(source: Any, settings: ServingSettings) -> Engine:
    """Starts an engine on ``source`` (a resolved model source) and its thread, and returns at
    once; ``status()["ready"]`` turns true when its policy has a bucket to serve from."""
    from compile_ahead.runtime.serving.engine_thread import start_device_engine

    return start_device_engine(source, settings)
