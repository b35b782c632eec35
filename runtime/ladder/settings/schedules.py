"""The schedules side by side: which rungs each compiles, when, and how it holds the KV.

A schedule is a value: the runner asks it which rungs exist and gets its compile policy from
rung_policy.make_policy and its KV store from kv_store.make_store. Adding a schedule means
adding an entry here (and, for a new kind of policy, a class in rung_policy.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from compile_ahead.errors import CompileAheadError


class KVPolicy(Enum):
    """How a schedule holds the KV across rungs."""

    SHARED_MAX = "shared-max"  # the top capacity from the start, every rung reads a prefix
    COPY_GROW = "copy-grow"  # the active rung's capacity; a boundary copies into the next
    RESERVE_COMMIT = "reserve-commit"  # the top capacity's address space, committed on write


class RungSet(Enum):
    TOP = "top"  # only the top capacity
    ALL = "all"  # every rung of the ladder


class CompileTiming(Enum):
    EAGER = "eager"  # every rung compiled before decoding
    ONE_AHEAD = "one-ahead"  # the first rung before decoding, then one successor in background


@dataclass(frozen=True)
class Schedule:
    name: str
    title: str
    rungs: RungSet
    compile: CompileTiming
    kv: KVPolicy
    release_retired: bool  # free a rung's compiled graph once the context has left it

    def ladder_rungs(self, rungs: tuple[int, ...]) -> tuple[int, ...]:
        """The capacities this schedule compiles out of a ladder."""
        return (rungs[-1],) if self.rungs is RungSet.TOP else rungs


SCHEDULES: dict[str, Schedule] = {
    s.name: s
    for s in (
        Schedule(
            "b0",
            "direct: top-capacity graph, top KV from startup",
            RungSet.TOP,
            CompileTiming.EAGER,
            KVPolicy.SHARED_MAX,
            release_retired=False,
        ),
        Schedule(
            "b1",
            "shared-max pyramid: all rungs up front, one top KV",
            RungSet.ALL,
            CompileTiming.EAGER,
            KVPolicy.SHARED_MAX,
            release_retired=False,
        ),
        Schedule(
            "i1",
            "copy-and-grow, eager: all rungs up front, KV grows by copy",
            RungSet.ALL,
            CompileTiming.EAGER,
            KVPolicy.COPY_GROW,
            release_retired=False,
        ),
        Schedule(
            "i2",
            "one-ahead JIT: next rung compiled while decoding, KV grows by copy",
            RungSet.ALL,
            CompileTiming.ONE_AHEAD,
            KVPolicy.COPY_GROW,
            release_retired=True,
        ),
        Schedule(
            "i3",
            "reserve-and-commit: one-ahead JIT, KV pages committed on write, no copy",
            RungSet.ALL,
            CompileTiming.ONE_AHEAD,
            KVPolicy.RESERVE_COMMIT,
            release_retired=True,
        ),
    )
}


def get_schedule(name: str) -> Schedule:
    try:
        return SCHEDULES[name.lower()]
    except KeyError:
        raise CompileAheadError(
            f"unknown schedule {name!r}; choose from {', '.join(SCHEDULES)}"
        ) from None
