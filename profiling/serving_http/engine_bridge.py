"""One request in the serving engine, seen from the HTTP server's event loop: the engine calls
back from its own thread, and the events are handed to the loop through
``call_soon_threadsafe`` onto an asyncio queue the request's handler reads."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compile_ahead.runtime.serving.api import Engine, TokenEvent


class Submission:
    """A request submitted to ``engine``; ``next_event()`` gives its TokenEvents, the last
    one with ``finished`` set; ``cancel()`` frees its row (a no-op once it finished). It is
    in ``active`` (the endpoint's requests in flight) until its last event."""

    def __init__(
        self,
        engine: Engine,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        prefix: str = "req",
        active: set[Submission] | None = None,
    ) -> None:
        self.request_id = f"{prefix}-{secrets.token_hex(12)}"
        self._engine = engine
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
        self.finished: str | None = None
        self._active = active if active is not None else set()
        self._active.add(self)
        engine.submit(self.request_id, list(prompt_ids), max_new_tokens, self._on_event)

    def _on_event(self, event: TokenEvent) -> None:
        """The engine's thread: hand the event to the loop (gone when the server stopped)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    async def next_event(self) -> TokenEvent:
        event = await self._queue.get()
        if event.finished is not None:
            self.finished = event.finished
            self._active.discard(self)
        return event

    def cancel(self) -> None:
        if self.finished is None:
            self._engine.cancel(self.request_id)
