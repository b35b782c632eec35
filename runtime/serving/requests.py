"""Requests as the engine sees them: what was asked (prompt ids, new tokens, arrival), where
each one is (queued, running in a row, finished and why) and the times its tokens came."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from enum import StrEnum

from compile_ahead.runtime.serving.events import (
    FINISHED_CANCELLED,
    FINISHED_EOS,
    FINISHED_LENGTH,
    FINISHED_REFUSED,
)


@dataclass(frozen=True)
class Request:
    """One greedy request: ``prompt`` token ids, up to ``max_new_tokens`` new ones, arriving
    ``arrival_s`` seconds after the engine starts (a replayed file's clock)."""

    request_id: str
    prompt: tuple[int, ...]
    max_new_tokens: int
    arrival_s: float = 0.0

    @property
    def slots(self) -> int:
        """KV slots the request may need: its prompt and every new token."""
        return len(self.prompt) + self.max_new_tokens


class State(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"  # in a row: prefilled, decoding
    FINISHED = "finished"
    REFUSED = "refused"


@dataclass
class Live:
    """A request's progress and times (seconds on the engine's clock)."""

    request: Request
    state: State = State.QUEUED
    row: int | None = None  # its row of the active bucket while running
    length: int = 0  # KV slots it fills
    tokens: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    finished_s: float | None = None
    message: str | None = None  # why it was refused or failed
    cancel_requested: bool = False

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def done(self) -> bool:
        return self.state in (State.FINISHED, State.REFUSED)

    @property
    def slots_needed_next(self) -> int:
        """Slots the row must hold for its next decode step (its new token's slot)."""
        return self.length + 1

    def add_token(self, token: int, now: float, eos: Collection[int]) -> str | None:
        """Record a new token; the finish reason when it is the last."""
        self.tokens.append(token)
        self.token_times.append(now)
        if token in eos:
            return FINISHED_EOS
        if len(self.tokens) >= self.request.max_new_tokens:
            return FINISHED_LENGTH
        if self.cancel_requested:
            return FINISHED_CANCELLED
        return None

    def finish(self, reason: str, now: float, message: str | None = None) -> None:
        self.state = State.REFUSED if reason == FINISHED_REFUSED else State.FINISHED
        self.finish_reason = reason
        self.finished_s = now
        self.message = message
        self.row = None
