"""The engine behind api.Engine: a ServingEngine run on its own thread, fed through an inbox.

Callers (the HTTP endpoint's threads) only put submits, cancels and metric requests into the
inbox and read snapshots; everything that touches the engine's state runs on its thread, where
every request's events are sent from.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from compile_ahead.runtime.serving.engine import ServingEngine
from compile_ahead.runtime.serving.events import (
    FINISHED_CANCELLED,
    FINISHED_ERROR,
    FINISHED_REFUSED,
    ServingSettings,
    TokenEvent,
)
from compile_ahead.runtime.serving.requests import Request

IDLE_POLL_S = 0.01  # how often an idle engine looks at a background compile in flight
# With none in flight an idle engine sleeps until a caller wakes it (every submit, cancel and
# metrics request does); this bounds the sleep, so that an idle server costs next to no CPU.
IDLE_WAIT_S = 1.0
METRICS_WAIT_S = 5.0  # a metrics() call waits this long for the engine's thread, then snapshots
# Finished requests kept for the metrics and the trace (the newest); older ones are forgotten,
# so a server's memory does not grow with the requests it has served.
KEEP_FINISHED = 10_000


class ThreadedEngine:
    """api.Engine over a ServingEngine; ``start`` runs its thread."""

    def __init__(self, engine: ServingEngine, max_context: int) -> None:
        self.engine = engine
        engine.keep_finished = KEEP_FINISHED
        self._max_context = max_context
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._draining = False
        self._stopped = threading.Event()
        self._error: str | None = None
        self._status: dict[str, Any] = {}
        self._status = self._snapshot_status()
        self._metrics: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, name="serving-engine", daemon=True)

    def start(self) -> ThreadedEngine:
        self._thread.start()
        return self

    # --- api.Engine ---------------------------------------------------------------------------

    def submit(
        self,
        request_id: str,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        on_event: Callable[[TokenEvent], None],
    ) -> None:
        request = Request(request_id, tuple(prompt_ids), max_new_tokens, self.engine.clock.now())
        if self._draining or self._stopped.is_set():
            why = self._error or "the engine is draining: it takes no new requests"
            on_event(TokenEvent(request_id, None, FINISHED_REFUSED, why))
            return
        self._put("submit", (request, self._status_first(on_event)))

    def _status_first(self, on_event: Callable[[TokenEvent], None]) -> Callable[[TokenEvent], None]:
        """``on_event`` with the status snapshot taken before a request's last event goes out,
        so a caller told that its request ended reads a status without it."""

        def send(event: TokenEvent) -> None:
            if event.finished is not None:
                self._status = self._snapshot_status()
            on_event(event)

        return send

    def cancel(self, request_id: str) -> None:
        self._put("cancel", request_id)

    def status(self) -> dict[str, Any]:
        return dict(self._status)

    def metrics(self) -> dict[str, Any]:
        if self._stopped.is_set():
            return dict(self._metrics)
        done: Future[dict[str, Any]] = Future()
        self._put("metrics", done)
        try:
            return done.result(timeout=METRICS_WAIT_S)
        except TimeoutError:  # busy on a long compile: the last snapshot
            return dict(self._metrics)

    def drain(self, timeout_s: float) -> None:
        self._draining = True
        self._put("drain", timeout_s)
        self._thread.join(timeout_s + 5.0)

    def stopped_engine(self) -> ServingEngine | None:
        """The engine once its thread has ended (its state is then safe to read), else None."""
        return None if self._thread.is_alive() or not self._stopped.is_set() else self.engine

    @property
    def eos_token_id(self) -> int | None:
        ids = self.engine.executor.eos_token_ids
        return min(ids) if ids else None

    @property
    def max_context(self) -> int:
        return self._max_context

    # --- the engine's thread ------------------------------------------------------------------

    def _put(self, kind: str, value: Any) -> None:
        self._inbox.put((kind, value))
        self._wake.set()

    def _run(self) -> None:
        deadline: float | None = None
        try:
            self.engine.start()
            while True:
                deadline = self._take_inbox(deadline)
                now = self.engine.clock.now()
                if deadline is not None and (not self.engine.busy or now >= deadline):
                    break
                did = self.engine.iterate()
                self._status = self._snapshot_status()
                if not did:
                    compiling = self.engine.compiles.compiling is not None
                    self._wake.wait(IDLE_POLL_S if compiling or self.engine.busy else IDLE_WAIT_S)
                    self._wake.clear()
        except Exception as err:  # every live request learns of it; the thread ends
            self._error = f"the serving engine failed: {err}".splitlines()[0]
            self._fail_all()
        finally:
            self._stop()

    def _take_inbox(self, deadline: float | None) -> float | None:
        while True:
            try:
                kind, value = self._inbox.get_nowait()
            except queue.Empty:
                return deadline
            if kind == "submit":
                request, on_event = value
                if deadline is not None:
                    self.engine.refuse(request, "the engine is draining", on_event)
                else:
                    self.engine.submit(request, on_event)
            elif kind == "cancel":
                self.engine.cancel(value)
            elif kind == "metrics":
                self._metrics = self.engine.report()
                value.set_result(self._metrics)
            elif kind == "drain":
                deadline = self.engine.clock.now() + float(value)

    def _fail_all(self) -> None:
        for live in list(self.engine.lives.values()):
            if not live.done:
                self.engine.abort(live, FINISHED_ERROR, self._error)

    def _stop(self) -> None:
        for live in list(self.engine.lives.values()):
            if not live.done:
                self.engine.abort(live, FINISHED_CANCELLED)
        self._metrics = self.engine.report()
        self._status = self._snapshot_status()
        self._stopped.set()
        while True:  # whatever came in meanwhile is refused, not lost
            try:
                kind, value = self._inbox.get_nowait()
            except queue.Empty:
                break
            if kind == "submit":
                self.engine.refuse(value[0], self._error or "the engine has stopped", value[1])
            elif kind == "metrics":
                value.set_result(self._metrics)
        self.engine.executor.close()

    def _snapshot_status(self) -> dict[str, Any]:
        e = self.engine
        compiling = e.compiles.compiling
        return {
            "ready": e.stats.ready_s is not None,
            "buckets": {
                "compiled": sorted([list(b) for b in e.compiles.compiled]),
                "compiling": [list(compiling)] if compiling else [],
            },
            "queued": len(e.queue),
            "running": len(e.running),
            "policy": e.policy.name,
            "error": self._error,  # why the engine stopped, if it failed (one line)
        }


def start_engine(source: Any, settings: ServingSettings) -> ThreadedEngine:
    """An api.Engine on the device executor for ``source`` (a resolved model source), its
    thread started; returns at once (``status()["ready"]`` turns true when its policy has a
    bucket to serve from). Bad settings are refused in one line (CompileAheadError)."""
    from compile_ahead.runtime.serving.device_executor import device_engine

    engine = device_engine(source, settings)
    return ThreadedEngine(engine, engine.grid.top_capacity).start()
