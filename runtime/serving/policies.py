"""Compile policies: when each bucket of the grid is compiled. A policy answers three
questions the engine asks, and the engine does the rest (compiling, one background compile at a
time, the memory budget's least-recently-used release):

- ``before_serving(grid)``: buckets compiled, in order, before any request is taken;
- ``on_request_path(plan)``: a missing bucket to compile now while requests wait (the engine
  compiles ``plan.required`` whatever the answer: without it nothing can go on);
- ``in_background(forecast)``: buckets worth compiling in the background, most urgent first;
  the engine starts the first that is neither compiled nor compiling, when none is compiling.

A new policy subclasses CompilePolicy and is added to POLICIES.
"""

from __future__ import annotations

from dataclasses import dataclass

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.serving.buckets import Bucket, Grid
from compile_ahead.runtime.serving.scheduler import Plan

# Rows of ahead's first bucket. A cold server's first requests often come close together
# (clients starting or retrying, a balancer turning to it), before any arrival rate is known,
# and a static bucket's compile grows little with its batch (the weights dominate the graph):
# one compile then serves a burst, padded until a smaller bucket is compiled in the background.
FIRST_BATCH = 4


@dataclass(frozen=True)
class Forecast:
    """The live state a policy predicts from: the active bucket, what is compiled or compiling,
    each running row's slots now and at its end (prompt + max new tokens), the queue, the
    arrival rate, the mean service time and the step time of the active bucket."""

    grid: Grid
    active: Bucket | None
    compiled: frozenset[Bucket]
    compiling: frozenset[Bucket]
    lengths: tuple[int, ...]  # each running row's filled slots
    finals: tuple[int, ...]  # each running row's slots at its last token
    queued: int
    queued_slots: tuple[int, ...]  # each queued request's prompt + 1, in arrival order
    arrival_rate: float  # requests per second, recent
    service_s: float  # mean seconds a request holds a row, recent (0 when unknown)
    step_s: float  # seconds per decode step of the active bucket (0 when unknown)
    compile_s: float  # seconds a bucket's compile took, recently (0 when unknown)
    wanted: Bucket | None  # the scheduler's Plan.wanted


class CompilePolicy:
    name = "base"

    def before_serving(self, grid: Grid) -> list[Bucket]:
        return []

    def on_request_path(self, plan: Plan) -> Bucket | None:
        return plan.required

    def in_background(self, forecast: Forecast) -> list[Bucket]:
        return []


class UpFront(CompilePolicy):
    """Every bucket before the first request (as vLLM, Gaudi, Neuron and NPUW warm up)."""

    name = "up-front"

    def before_serving(self, grid: Grid) -> list[Bucket]:
        return list(grid)


class OnDemand(CompilePolicy):
    """A bucket compiles when first needed, and the requests wait (VLLM_SKIP_WARMUP)."""

    name = "on-demand"

    def on_request_path(self, plan: Plan) -> Bucket | None:
        if plan.required is not None:
            return plan.required
        serve, want = plan.serve_on, plan.wanted
        # needed only when the compiled one cannot serve everything the wanted one would
        if want is not None and serve is not None and not serve.holds(*want):
            return want
        return None


class Ahead(CompilePolicy):
    """Ours: the next bucket in each dimension, predicted from live state and compiled in the
    background before it is needed.

    - Batch: queued requests beyond the free rows need the scheduler's wanted bucket now.
      Otherwise, by Little's law, arrivals at rate r each holding a row for s seconds keep r*s
      rows busy; when that nears the batch size the next one is due, in (free rows)/r seconds.
    - Context: a running row whose prompt + max new tokens outgrows the capacity needs the
      capacity that holds it, due when the longest row reaches the boundary (C - length steps
      of the active bucket), at the batch size the batch forecast predicts by then.
    - First of all, from the start: the smallest capacity (or the one the queue's head needs)
      at FIRST_BATCH rows, so that the first requests find it compiled, several at once.
    A context deadline within two compiles' time comes first (it would stall every running
    row), then the wanted bucket, then the batch forecast, then later context deadlines, and
    last a wanted bucket smaller than the active one (it saves padding; nobody waits for it).
    """

    name = "ahead"

    def on_request_path(self, plan: Plan) -> Bucket | None:
        """When requests must wait for a compile anyway, the bucket that serves them all."""
        if plan.required is None:
            return None
        want = plan.wanted
        return want if want is not None and want.holds(*plan.required) else plan.required

    def in_background(self, f: Forecast) -> list[Bucket]:
        grid = f.grid
        base = f.active or f.wanted
        if base is None:
            head = f.queued_slots[0] if f.queued_slots else 1
            first = grid.fitting(min(FIRST_BATCH, grid.top_batch), head)
            return [first] if first is not None else []
        # (urgency class, due seconds, bucket): a context deadline within reach of a compile
        # stalls every running row, so it goes first; then what the queue needs now.
        due: list[tuple[int, float, Bucket]] = []
        if f.wanted is not None and f.wanted != f.active:
            # a smaller bucket only saves padding: after every bucket someone will wait for
            down = f.active is not None and f.active.holds(*f.wanted)
            due.append((4 if down else 1, 0.0, f.wanted))
        batch, batch_due = self._batch(f, base)
        if batch_due is not None:
            due.append((2, batch_due, Bucket(batch, base.capacity)))
        longest = max(f.finals, default=0)
        if longest > base.capacity:
            capacity = grid.capacity_for(longest) or grid.top_capacity
            steps = max(base.capacity - max(f.lengths, default=0), 0)
            when = steps * f.step_s
            near = not f.compile_s or when <= 2 * f.compile_s
            # requests queued now and a deadline near: one compile serves both
            rows = batch if near and batch_due == 0.0 else base.batch
            due.append((0 if near else 3, when, Bucket(rows, capacity)))
            if batch_due is not None:
                due.append((3, max(when, batch_due), Bucket(batch, capacity)))
        return _ordered(due)

    @staticmethod
    def _batch(f: Forecast, base: Bucket) -> tuple[int, float | None]:
        """The batch size the forecast needs next, and in how many seconds."""
        up = f.grid.up_batch(base)
        if up is None:
            return base.batch, None
        free = base.batch - len(f.lengths)
        if f.queued > free:
            return up.batch, 0.0
        busy = f.arrival_rate * f.service_s  # rows Little's law keeps busy
        if f.arrival_rate > 0 and busy > 0.75 * base.batch:
            wanted = f.grid.batch_for(int(busy / 0.75) + 1) or f.grid.top_batch
            return wanted, max(free, 0) / f.arrival_rate
        return base.batch, None


def _ordered(due: list[tuple[int, float, Bucket]]) -> list[Bucket]:
    seen: list[Bucket] = []
    for _, _, bucket in sorted(due, key=lambda d: (d[0], d[1], d[2].batch * d[2].capacity)):
        if bucket not in seen:
            seen.append(bucket)
    return seen


POLICIES: dict[str, type[CompilePolicy]] = {p.name: p for p in (UpFront, OnDemand, Ahead)}


def make_policy(name: str) -> CompilePolicy:
    """The policy named ``name``, refused in one line when unknown."""
    try:
        return POLICIES[name]()
    except KeyError:
        known = ", ".join(POLICIES)
        raise CompileAheadError(f"unknown serving policy {name!r} (known: {known})") from None
