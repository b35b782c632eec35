"""What the serving engine tells its callers and what it is built from: the events of a
request (``TokenEvent``, the ways a request ends) and the settings of an engine
(``ServingSettings``). The engine's modules import them from here; callers take them from
``api``, which re-exports them beside the ``Engine`` interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    # whether the model's EOS ids end a request (default False: max_new_tokens does);
    # "prefill_chunk": tokens per call of the batch-1 prefill graph (default 128).
    compile_options: dict[str, Any] | None = None
