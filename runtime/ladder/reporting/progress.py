"""A progress bar for ladder runs: rung, tokens, tok/s and the background compile's state."""

from __future__ import annotations

import sys
import threading
from typing import Any

from tqdm import tqdm

from compile_ahead.runtime.ladder.reporting.events import RunEvents


class ProgressBar(RunEvents):
    """A tqdm bar on a terminal; elsewhere (logs, CI) a plain line per rung and every
    ``log_every_s`` seconds, never carriage-return frames."""

    def __init__(self, total: int, enabled: bool = True, every: int = 8, log_every_s: float = 10.0):
        self._tty = sys.stderr.isatty()
        self._log = enabled and not self._tty
        self._log_every_ns = int(log_every_s * 1e9)
        self._logged_ns = 0
        self._logged_rung: int | None = None
        self._done = 0
        self._prompts = 0  # prefilled so far
        self._total = total
        self._bar = tqdm(
            total=total,
            unit="tok",
            file=sys.stderr,
            disable=not enabled or not self._tty,
            dynamic_ncols=True,
            leave=True,
        )
        self._every = every
        self._compile = "idle"
        self._lock = threading.Lock()
        self._pending = 0
        self._last_ns = 0
        self._rate = 0.0

    def compile_started(
        self, job: int, capacity: int, kind: str, background: bool, ts: int
    ) -> None:
        with self._lock:
            self._compile = f"{'bg' if background else 'fg'} C={capacity} {kind}"
        self._refresh()

    def compile_finished(
        self, job: int, capacity: int, kind: str, ok: bool, ts: int, info: dict[str, Any]
    ) -> None:
        with self._lock:
            self._compile = f"C={capacity} {'ready' if ok else 'FAILED'}"
        self._refresh()

    def prefill(self, capacity: int, tokens: int, begin: int, end: int) -> None:
        """A prompt prefilled: logged at the first and then every ``log_every_s``, so a
        batch of many prompts shows its prefill going on."""
        self._prompts += 1
        if not self._log or (self._prompts > 1 and end - self._logged_ns < self._log_every_ns):
            return
        self._logged_ns = end
        with self._lock:
            state = self._compile
        print(
            f"prefilling: {self._prompts} prompt(s) done, rung {capacity}, compile: {state}",
            file=sys.stderr,
            flush=True,
        )

    def step(self, token_index: int, capacity: int, begin: int, end: int) -> None:
        if self._log:
            self._log_line(token_index + 1, capacity, end)
        self._pending += 1
        self._rung = capacity
        if self._pending >= self._every:
            if self._last_ns:
                self._rate = self._pending / ((end - self._last_ns) / 1e9)
            self._last_ns = end
            self._bar.update(self._pending)
            self._pending = 0
            self._refresh()

    def _refresh(self) -> None:
        with self._lock:
            state = self._compile
        self._bar.set_postfix_str(
            f"rung={getattr(self, '_rung', '-')} {self._rate:.1f} tok/s compile: {state}",
            refresh=True,
        )

    def _log_line(self, done: int, capacity: int, now: int) -> None:
        if capacity == self._logged_rung and now - self._logged_ns < self._log_every_ns:
            return
        self._logged_rung, self._logged_ns = capacity, now
        with self._lock:
            state = self._compile
        print(
            f"progress: {done}/{self._total} tokens, rung {capacity}, compile: {state}",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        self._bar.update(self._pending)
        self._pending = 0
        self._bar.close()
