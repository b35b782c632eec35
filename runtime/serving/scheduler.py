"""The scheduler's decisions, pure functions of the live state (no clock, no device).

Each iteration the engine asks ``plan``: which compiled bucket to serve from now, how many
queued requests it admits, the bucket that would serve everything that is live and queued
(``wanted``: a policy may compile it), and the bucket that must exist before anything can go on
(``required``). Nothing live is ever evicted: a bucket is a candidate only if it holds every
running row (their count, and the slots the longest needs for its next step). Among candidates
the one that admits the most queued requests wins, then the active one (no move), then the
smallest. A smaller bucket than the active one is a move down: never to a capacity a running
row will outgrow before it ends, and only when the caller allows it (``down_ok``: after the
state has fitted it for a while, so one arrival does not bounce the engine up and down).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from compile_ahead.runtime.serving.buckets import Bucket, Grid


@dataclass(frozen=True)
class View:
    """What the scheduler sees: the grid, what is compiled, the active bucket, the slots each
    running row needs for its next step, and (in arrival order) the slots each queued request
    needs to be prefilled and take one step (its prompt + 1)."""

    grid: Grid
    active: Bucket | None
    compiled: frozenset[Bucket]
    running: tuple[int, ...]
    queued: tuple[int, ...]
    finals: tuple[int, ...] = ()  # each running row's slots at its last token, when known


@dataclass(frozen=True)
class Plan:
    serve_on: Bucket | None  # a compiled bucket to serve from now; None: none can
    admits: int  # queued requests (from the head) serve_on takes now
    wanted: Bucket | None  # the smallest bucket serving every running and admissible queued
    required: Bucket | None  # must be compiled before anything goes on (serve_on is None)

    @property
    def moves(self) -> bool:
        return self.serve_on is not None


def admits(bucket: Bucket, running: Sequence[int], queued: Sequence[int]) -> int:
    """Queued requests, from the head, that ``bucket`` takes beside the running rows: first come
    first served, so a head that does not fit blocks the ones behind it."""
    free = bucket.batch - len(running)
    n = 0
    for need in queued:
        if n >= free or need > bucket.capacity:
            break
        n += 1
    return n


def holds_running(bucket: Bucket, running: Sequence[int]) -> bool:
    return bucket.holds(len(running), max(running, default=0))


def wanted(grid: Grid, running: Sequence[int], queued: Sequence[int]) -> Bucket | None:
    """The smallest bucket holding every running row and as many queued requests (from the
    head) as the top batch size leaves room for; None when nothing is live."""
    room = max(grid.top_batch - len(running), 0)
    taken = list(queued[:room])
    if not running and not taken:
        return None
    return grid.fitting(len(running) + len(taken), max([*running, *taken], default=1))


def required(grid: Grid, running: Sequence[int], queued: Sequence[int]) -> Bucket | None:
    """The smallest bucket that lets anything go on: the running rows' next step, or with none
    running the head of the queue's prefill and first step."""
    if running:
        return grid.fitting(len(running), max(running))
    if queued:
        return grid.fitting(1, queued[0])
    return None


def plan(view: View, down_ok: bool = True) -> Plan:
    want = wanted(view.grid, view.running, view.queued)
    candidates = [b for b in view.compiled if holds_running(b, view.running)]
    if view.finals:  # never down to a bucket the running rows will outgrow again
        top = max(view.finals)
        candidates = [b for b in candidates if not is_down(view.active, b) or b.capacity >= top]
    if not candidates:
        need = required(view.grid, view.running, view.queued)
        return Plan(None, 0, want, need)
    if not view.running and not view.queued:  # idle: stay, or the smallest compiled
        stay = view.active if view.active in candidates else None
        best = stay if stay is not None and not down_ok else _smallest(candidates)
        return Plan(best, 0, want, None)
    best = max(
        candidates,
        key=lambda b: (
            admits(b, view.running, view.queued),
            b == view.active and not down_ok,
            -(b.batch * b.capacity),
            b == view.active,
        ),
    )
    n = admits(best, view.running, view.queued)
    if n == 0 and not view.running:  # compiled buckets, but none takes the head of the queue
        return Plan(None, 0, want, required(view.grid, view.running, view.queued))
    return Plan(best, n, want, None)


def is_down(active: Bucket | None, target: Bucket) -> bool:
    """Whether moving from ``active`` to ``target`` shrinks a dimension."""
    return active is not None and (target.batch < active.batch or target.capacity < active.capacity)


def _smallest(buckets: Iterable[Bucket]) -> Bucket:
    return min(buckets, key=lambda b: (b.batch * b.capacity, b.batch))


def row_moves(rows: Sequence[int | None], batch: int) -> dict[int, int]:
    """Where the running rows go in a bucket of ``batch`` rows: rows that fit stay where they
    are, the others take the lowest free rows (old row -> new row)."""
    taken = [r for r in rows if r is not None]
    kept = {r: r for r in taken if r < batch}
    free = (r for r in range(batch) if r not in kept)
    for r in sorted(r for r in taken if r >= batch):
        kept[r] = next(free)
    return kept
