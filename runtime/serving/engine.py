"""The serving engine's loop: continuous batching on static buckets.

Each ``iterate`` takes in a finished background compile, lets the policy start the next one,
asks the scheduler where to serve (scheduler.plan), compiles on the request path what the
policy says must exist now, moves to the planned bucket (the live rows' KV moved by the
executor), prefills admitted requests into free rows (each on the batch-1 prefill path, its
first token out at once), and steps every running row once. A row is freed the moment its
request finishes. Events go to each request's callback as api.TokenEvent.

The engine is single-threaded: ``replay`` feeds it a request file on its clock, and
engine_thread runs it behind the api.Engine interface.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from compile_ahead.runtime.serving.buckets import Bucket, Grid
from compile_ahead.runtime.serving.compiles import Compiles
from compile_ahead.runtime.serving.events import (
    FINISHED_CANCELLED,
    FINISHED_REFUSED,
    TokenEvent,
)
from compile_ahead.runtime.serving.executor import PREFILL, SWITCH, Executor, activity_key
from compile_ahead.runtime.serving.metrics import EngineStats, Slo, request_metrics
from compile_ahead.runtime.serving.policies import CompilePolicy, Forecast
from compile_ahead.runtime.serving.requests import Live, Request, State
from compile_ahead.runtime.serving.scheduler import Plan, View, is_down, plan, row_moves

OnEvent = Callable[[TokenEvent], None]
RATE_WINDOW_S = 30.0  # arrivals counted for the arrival rate
SERVICE_WINDOW = 32  # finished requests averaged for the service time


class ServingEngine:
    def __init__(
        self,
        grid: Grid,
        policy: CompilePolicy,
        executor: Executor,
        budget_bytes: int | None = None,
        slo: Slo | None = None,
        down_delay_steps: int = 8,
    ) -> None:
        self.grid = grid
        self.policy = policy
        self.executor = executor
        self.clock = executor.clock
        self.slo = slo or Slo()
        self.down_delay_steps = down_delay_steps
        self.stats = EngineStats(policy=policy.name, clock=self.clock.kind)
        self.compiles = Compiles(grid, executor, policy, self.stats, budget_bytes)
        self.lives: dict[str, Live] = {}
        self.queue: deque[Live] = deque()
        self.rows: list[Live | None] = []
        self.active: Bucket | None = None
        self.row_spans: list[dict] = []  # row, request, start_s, end_s: the trace's row tracks
        self._callbacks: dict[str, OnEvent] = {}
        self._arrivals: deque[float] = deque()
        self._services: deque[float] = deque(maxlen=SERVICE_WINDOW)
        self._step_s = 0.0
        self._busy_s = 0.0  # the executor's time in the current iteration
        self._down_streak = 0
        self._span_start: dict[str, float] = {}
        # A listening server runs for ever: it keeps (for its metrics and trace) the newest
        # keep_finished finished requests, their row spans and as many bucket switches and
        # compiles; a replay keeps everything (None).
        self.keep_finished: int | None = None
        self.forgotten = 0  # finished requests no longer kept
        self._finished: deque[str] = deque()

    # --- requests -----------------------------------------------------------------------------

    def submit(self, request: Request, on_event: OnEvent | None = None) -> Live:
        """Queue a request (or refuse it at once, with one event)."""
        now = self.clock.now()
        live = Live(request)
        self.lives[request.request_id] = live
        if on_event is not None:
            self._callbacks[request.request_id] = on_event
        self._arrivals.append(now)
        why = self.refusal(request)
        if why is not None:
            self._finish(live, FINISHED_REFUSED, why)
        else:
            self.queue.append(live)
        return live

    def refusal(self, request: Request) -> str | None:
        if not request.prompt:
            return "the prompt is empty"
        if request.max_new_tokens < 1:
            return "max_new_tokens must be at least 1"
        if request.slots > self.grid.top_capacity:
            return (
                f"prompt ({len(request.prompt)} tokens) + max_new_tokens "
                f"({request.max_new_tokens}) exceed the top capacity ({self.grid.top_capacity})"
            )
        return None

    def refuse(self, request: Request, why: str, on_event: OnEvent | None = None) -> None:
        """Record a request refused before it reached the engine (e.g. while draining)."""
        live = Live(request)
        self.lives.setdefault(request.request_id, live)
        if on_event is not None:
            self._callbacks[request.request_id] = on_event
        self._finish(live, FINISHED_REFUSED, why)

    def cancel(self, request_id: str) -> None:
        live = self.lives.get(request_id)
        if live is None or live.done:
            return
        if live.state is State.QUEUED:
            self.queue.remove(live)
            self._finish(live, FINISHED_CANCELLED)
        else:
            live.cancel_requested = True

    def abort(self, live: Live, reason: str, message: str | None = None) -> None:
        """End a queued or running request now (cancelled, or failed with the engine)."""
        if live.done:
            return
        if live.state is State.QUEUED:
            self.queue.remove(live)
        self._finish(live, reason, message)

    @property
    def running(self) -> list[Live]:
        return [x for x in self.rows if x is not None]

    @property
    def busy(self) -> bool:
        return bool(self.queue) or any(x is not None for x in self.rows)

    # --- the loop -----------------------------------------------------------------------------

    def start(self) -> None:
        """The policy's compiles before serving (up-front's whole grid)."""
        self.compiles.before_serving()

    def iterate(self) -> bool:
        """One round of the loop; whether it did anything (else the caller may idle)."""
        t0, self._busy_s = self.clock.now(), 0.0
        self.compiles.poll()
        self._cancel_running()
        plan_now = self._plan()
        need = self.policy.on_request_path(plan_now)
        if need is not None and need not in self.compiles.compiled:
            self.compiles.on_request_path(need, plan_now.required)
            return True
        target, admitted = plan_now.serve_on, False
        if target is not None:
            if target != self.active:
                self._switch(target)
            admitted = self._admit(plan_now.admits)
        # predicted from the state the rows are in now, the admitted requests included
        forecast = self._forecast(self._plan() if admitted else plan_now)
        self.compiles.maybe_background(forecast, keep=(self.active,))
        stepped = self._step()
        if stepped:  # the engine's own work in this iteration, beside the executor's
            assert self.active is not None
            own = self.clock.now() - t0 - self._busy_s
            self.stats.timings.engine_work(self.active, self._background(), own)
        return stepped or admitted

    def _background(self) -> bool:
        return self.compiles.compiling is not None

    def _worked(self, t0: float, activity: str) -> float:
        """The device's work since ``t0`` (its seconds): this iteration's busy time, and time
        a background compile shared the host with it."""
        now = self.clock.now()
        self._busy_s += now - t0
        self.compiles.worked(t0, now, activity)
        return now - t0

    def _view(self) -> View:
        return View(
            self.grid,
            self.active,
            self.compiles.compiled,
            tuple(x.slots_needed_next for x in self.running),
            tuple(len(x.request.prompt) + 1 for x in self.queue),
            tuple(x.request.slots - 1 for x in self.running),
        )

    def _plan(self) -> Plan:
        """The scheduler's plan, a move down taken only after it has held for a while."""
        view = self._view()
        stay = plan(view, down_ok=False)
        if stay.serve_on is None or stay.serve_on != self.active:
            self._down_streak = 0
            return stay
        down = plan(view, down_ok=True)
        if down.serve_on is not None and is_down(self.active, down.serve_on):
            self._down_streak += 1
            if self._down_streak >= self.down_delay_steps:
                self._down_streak = 0
                return down
        else:
            self._down_streak = 0
        return stay

    def _forecast(self, p: Plan) -> Forecast:
        now = self.clock.now()
        while self._arrivals and self._arrivals[0] < now - RATE_WINDOW_S:
            self._arrivals.popleft()
        window = min(RATE_WINDOW_S, now)
        rate = len(self._arrivals) / window if window > 0 else 0.0
        running = self.running
        service = sum(self._services) / len(self._services) if self._services else 0.0
        if not service and running:
            service = self._step_s * sum(x.request.max_new_tokens for x in running) / len(running)
        return Forecast(
            self.grid,
            self.active,
            self.compiles.compiled,
            frozenset([self.compiles.compiling] if self.compiles.compiling else []),
            tuple(x.length for x in running),
            tuple(x.request.slots - 1 for x in running),
            len(self.queue),
            tuple(len(x.request.prompt) + 1 for x in self.queue),
            rate,
            service,
            self._step_s,
            self.compiles.recent_compile_s(),
            p.wanted,
        )

    def _switch(self, target: Bucket) -> None:
        t0 = self.clock.now()
        old = [i for i, x in enumerate(self.rows) if x is not None]
        moves = row_moves(old, target.batch)
        lengths = {r: self.rows[r].length for r in old}  # type: ignore[union-attr]
        copied = self.executor.activate(target, moves, lengths)
        self._worked(t0, SWITCH)
        rows: list[Live | None] = [None] * target.batch
        for src, dst in moves.items():
            live = self.rows[src]
            assert live is not None
            rows[dst] = live
            if src != dst:
                self._close_span(live, t0)
                live.row = dst
                self._span_start[live.request_id] = t0
        self.stats.switch_count += 1
        self.stats.switches.append(
            {
                "from": list(self.active) if self.active else None,
                "to": list(target),
                "at_s": t0,
                "seconds": self.clock.now() - t0,
                "bytes": copied,
                "rows": len(moves),  # live rows carried across
            }
        )
        self.stats.kv_bytes_copied += copied
        self.rows, self.active = rows, target
        self.stats.buckets_used.add(target)
        self.compiles.touch(target)

    def _admit(self, n: int) -> bool:
        for _ in range(n):
            live = self.queue.popleft()
            row = self.rows.index(None)
            self.rows[row] = live
            live.state, live.row = State.RUNNING, row
            t0 = self._span_start[live.request_id] = self.clock.now()
            token = self.executor.prefill(row, live.request.prompt)
            took = self._worked(t0, PREFILL)
            cost = self.executor.prefill_tokens(len(live.request.prompt))
            self.stats.timings.prefilled(cost, self._background(), took)
            if self.stats.first_prefill_s is None:
                self.stats.first_prefill_s = took
            live.length = len(live.request.prompt)
            self._token(live, token)
        return n > 0

    def _step(self) -> bool:
        feeds = {x.row: (x.tokens[-1], x.length) for x in self.running if x.row is not None}
        if not feeds:
            return False
        assert self.active is not None
        self.compiles.touch(self.active)
        t0 = self.clock.now()
        out = self.executor.step(feeds)
        took = self._worked(t0, activity_key(self.active.batch))
        self.stats.timings.step(self.active, self._background(), took)
        self._step_s = took if not self._step_s else 0.8 * self._step_s + 0.2 * took
        self.stats.steps += 1
        for row, token in out.items():
            live = self.rows[row]
            assert live is not None
            live.length += 1
            self._token(live, token)
        return True

    def _token(self, live: Live, token: int) -> None:
        now = self.clock.now()
        reason = live.add_token(token, now, self.executor.eos_token_ids)
        if self.stats.first_token_s is None:
            self.stats.first_token_s = now
        self._emit(TokenEvent(live.request_id, token, None))
        if reason is not None:
            self._services.append(now - live.token_times[0])
            self._finish(live, reason)

    def _cancel_running(self) -> None:
        for live in self.running:
            if live.cancel_requested:
                self._finish(live, FINISHED_CANCELLED)

    def _finish(self, live: Live, reason: str, message: str | None = None) -> None:
        now = self.clock.now()
        if live.row is not None:
            self.rows[live.row] = None
            self._close_span(live, now)
        live.finish(reason, now, message)
        self._emit(TokenEvent(live.request_id, None, reason, message))
        self._callbacks.pop(live.request_id, None)
        if self.keep_finished is not None:
            self._finished.append(live.request_id)
            self._forget_beyond(self.keep_finished)

    def _forget_beyond(self, keep: int) -> None:
        while len(self._finished) > keep:
            self.lives.pop(self._finished.popleft(), None)
            self.forgotten += 1
        if len(self.row_spans) > 2 * keep + len(self.rows):  # amortized: rebuilt now and then
            self.row_spans = [s for s in self.row_spans if s["request"] in self.lives]
        self.stats.keep_newest(keep)

    def _close_span(self, live: Live, now: float) -> None:
        start = self._span_start.pop(live.request_id, None)
        if start is not None and live.row is not None:
            self.row_spans.append(
                {"row": live.row, "request": live.request_id, "start_s": start, "end_s": now}
            )

    def _emit(self, event: TokenEvent) -> None:
        callback = self._callbacks.get(event.request_id)
        if callback is not None:
            callback(event)

    # --- what it reports ----------------------------------------------------------------------

    def report(self) -> dict:
        self.stats.peak_rss_bytes = self.executor.peak_rss_bytes()
        return {
            "grid": self.grid.to_json(),
            "policy": self.policy.name,
            "requests_metrics": request_metrics(self.lives.values(), self.slo),
            "engine": self.stats.to_json(),
            "requests": [self._request_record(x) for x in self.lives.values()],
            # requests finished earlier and no longer kept (a listening server's window)
            "requests_forgotten": self.forgotten,
        }

    def _request_record(self, live: Live) -> dict:
        """One request's outcome; its tokens only where they were computed (not simulated)."""
        times = live.token_times
        record = {
            "id": live.request_id,
            "arrival_s": live.request.arrival_s,
            "prompt_tokens": len(live.request.prompt),
            "new_tokens": len(live.tokens),
            "finished": live.finish_reason,
            "ttft_s": times[0] - live.request.arrival_s if times else None,
            "e2e_s": times[-1] - live.request.arrival_s if times else None,
        }
        if self.clock.kind == "wall":
            record["tokens"] = list(live.tokens)
        return record


def replay(engine: ServingEngine, requests: Iterable[Request]) -> None:
    """Serve ``requests`` at their arrival times on the engine's clock, to the last token."""
    pending = deque(sorted(requests, key=lambda r: r.arrival_s))
    engine.start()
    while True:
        now = engine.clock.now()
        while pending and pending[0].arrival_s <= now:
            engine.submit(pending.popleft())
        if engine.iterate():
            continue
        if not pending and not engine.busy:
            break
        if not pending and engine.compiles.compiling is None:
            raise RuntimeError("the serving engine has live requests and nothing to do")
        engine.executor.wait(pending[0].arrival_s if pending else None)
