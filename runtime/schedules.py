"""The schedules side by side: what each compiles when, and how it holds the KV."""

from __future__ import annotations

from dataclasses import dataclass

from compile_ahead.errors import CompileAheadError


@dataclass(frozen=True)
class Schedule:
    name: str
    title: str
    rungs: str  # "top": only the top capacity; "all": every rung of the ladder
    compile: str  # "eager": everything before decoding; "one-ahead": next rung in background
    kv: str  # "shared-max" | "copy-grow" | "reserve-commit"
    release_retired: bool  # free a rung's compiled model once the context has left it


SCHEDULES: dict[str, Schedule] = {
    s.name: s
    for s in (
        Schedule(
            "b0",
            "direct: top-capacity graph, top KV from startup",
            "top",
            "eager",
            "shared-max",
            False,
        ),
        Schedule(
            "b1",
            "shared-max pyramid: all rungs up front, one top KV",
            "all",
            "eager",
            "shared-max",
            False,
        ),
        Schedule(
            "i1",
            "copy-and-grow, eager: all rungs up front, KV grows by copy",
            "all",
            "eager",
            "copy-grow",
            False,
        ),
        Schedule(
            "i2",
            "one-ahead JIT: next rung compiled while decoding, KV grows by copy",
            "all",
            "one-ahead",
            "copy-grow",
            True,
        ),
        Schedule(
            "i3",
            "reserve-and-commit: one-ahead JIT, KV pages committed on write, no copy",
            "all",
            "one-ahead",
            "reserve-commit",
            True,
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
