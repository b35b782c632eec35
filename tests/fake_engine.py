"""A stand-in for the serving engine (runtime/serving/api.py's Engine) in the endpoint's fast
tests: it answers every request with a deterministic token sequence (``expected_tokens``), one
token per step of STEP_S on its own thread, ROWS requests at a time, so the HTTP layer's
semantics (streams, bodies, usage, cancels, drains) are tested without compiling anything. The
real engine's tokens are tested against transformers in test_endpoint_engine.py."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

try:
    from compile_ahead.runtime.serving.api import TokenEvent
except ImportError:  # the serving branch's module not merged yet: the agreed shape

    @dataclass(frozen=True)
    class TokenEvent:  # type: ignore[no-redef]
        request_id: str
        token: int | None
        finished: str | None
        message: str | None = None


VOCAB = 1000
EOS = 2
# A prompt that starts with this id ends with EOS at its fourth generated token.
EOS_TRIGGER = 999
STEP_S = 0.005


def expected_tokens(prompt: Sequence[int], max_new_tokens: int) -> tuple[list[int], str]:
    """The fake's answer to ``prompt``: its tokens and why it ended ("eos" or "length")."""
    tokens: list[int] = []
    last = sum(prompt) % VOCAB
    for k in range(max_new_tokens):
        if prompt[0] == EOS_TRIGGER and k == 3:
            tokens.append(EOS)
            return tokens, "eos"
        last = (last * 31 + 7 + k) % VOCAB
        if last == EOS:
            last = 3
        tokens.append(last)
    return tokens, "length"


@dataclass
class _Row:
    request_id: str
    tokens: list[int]
    reason: str
    on_event: Callable[[TokenEvent], None]
    sent: int = 0
    cancelled: bool = False


@dataclass
class FakeEngine:
    rows: int = 4
    max_context: int = 256
    step_s: float = STEP_S
    ready: bool = True
    eos_token_id: int | None = EOS
    refuse: str | None = None  # set: every request is refused with this message
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _queue: deque = field(default_factory=deque)
    _running: dict = field(default_factory=dict)
    _cancels: set = field(default_factory=set)
    _draining: bool = False
    _stop: bool = False
    submitted: list = field(default_factory=list)
    cancelled: list = field(default_factory=list)
    peak_running: int = 0

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="fake-engine", daemon=True)
        self._thread.start()

    def submit(self, request_id, prompt_ids, max_new_tokens, on_event) -> None:
        prompt = list(prompt_ids)
        with self._lock:
            self.submitted.append((request_id, prompt, max_new_tokens))
            refused = None
            if self.refuse is not None:
                refused = self.refuse
            elif self._draining:
                refused = "the engine is draining"
            elif not prompt:
                refused = "empty prompt"
            elif len(prompt) + max_new_tokens > self.max_context:
                refused = "beyond the top capacity"
            if refused is None:
                tokens, reason = expected_tokens(prompt, max_new_tokens)
                self._queue.append(_Row(request_id, tokens, reason, on_event))
                return
        on_event(TokenEvent(request_id, None, "refused", refused))

    def cancel(self, request_id) -> None:
        with self._lock:
            self._cancels.add(request_id)

    def status(self) -> dict:
        with self._lock:
            return {
                "ready": self.ready,
                "buckets": {"compiled": [[1, 256], [4, 256]], "compiling": [[8, 256]]},
                "queued": len(self._queue),
                "running": len(self._running),
                "policy": "fake",
            }

    def metrics(self) -> dict:
        return {"ttft_s": {"p50": 0.01, "p99": 0.02}, "requests_finished": len(self.submitted)}

    def drain(self, timeout_s: float) -> None:
        with self._lock:
            self._draining = True
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._running and not self._queue:
                    break
            time.sleep(self.step_s)
        with self._lock:
            self._cancels.update(self._running)
            self._cancels.update(r.request_id for r in self._queue)
        time.sleep(3 * self.step_s)
        with self._lock:
            self._stop = True
        self._thread.join(5)

    def running_count(self) -> int:
        with self._lock:
            return len(self._running) + len(self._queue)

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._stop:
                    return
                while self._queue and len(self._running) < self.rows:
                    row = self._queue.popleft()
                    self._running[row.request_id] = row
                self.peak_running = max(self.peak_running, len(self._running))
                emit: list[tuple[_Row, TokenEvent]] = []
                for rid in list(self._running):
                    row = self._running[rid]
                    if rid in self._cancels:
                        del self._running[rid]
                        self.cancelled.append(rid)
                        emit.append((row, TokenEvent(rid, None, "cancelled")))
                    elif row.sent < len(row.tokens):
                        emit.append((row, TokenEvent(rid, row.tokens[row.sent], None)))
                        row.sent += 1
                    else:
                        del self._running[rid]
                        emit.append((row, TokenEvent(rid, None, row.reason)))
                for rid in list(self._cancels):
                    queued = [r for r in self._queue if r.request_id == rid]
                    for row in queued:
                        self._queue.remove(row)
                        self.cancelled.append(rid)
                        emit.append((row, TokenEvent(rid, None, "cancelled")))
                self._cancels.clear()
            for row, event in emit:
                row.on_event(event)
            time.sleep(self.step_s)
