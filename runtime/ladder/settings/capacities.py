"""The capacity ladder: which static graphs exist, and which one holds a given context."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compile_ahead.errors import CompileAheadError

# NPU compilers tile the sequence dimension; rung capacities stay multiples of this.
LADDER_ALIGNMENT = 16

DEFAULT_LADDER = (1024, 2048, 4096, 8192)
# Scaled ladders keep the seed's shape (doubling rungs, prompt 1/8 of the first rung) for
# quick runs: "scaled" is 1/16 of the default.
NAMED_LADDERS = {
    "default": DEFAULT_LADDER,
    "scaled": (64, 128, 256, 512),
    "tiny": (16, 32, 64, 128),
}


def rung_holding(rungs: Sequence[int], slots: int) -> int | None:
    """The smallest rung with room for ``slots`` KV slots (the active graph), or None."""
    return next((r for r in rungs if r >= slots), None)


def near_boundary(rungs: Sequence[int], context: int, window: int) -> bool:
    """Whether a step at ``context`` filled slots is within ``window`` steps of a boundary."""
    return any(-window <= context - c < window for c in rungs)


@dataclass(frozen=True)
class Ladder:
    rungs: tuple[int, ...]

    @classmethod
    def parse(cls, text: str | tuple[int, ...] | list[int]) -> Ladder:
        """From "1024,2048,..." or a named ladder (default, scaled, tiny)."""
        if isinstance(text, str):
            if text in NAMED_LADDERS:
                return cls(NAMED_LADDERS[text]).validate()
            parts = [p.strip() for p in text.split(",")] if text.strip() else []
            if "" in parts:  # "16,,32" or "16,32,": a rung left out, not a shorter ladder
                raise CompileAheadError(
                    f"--ladder {text!r}: rung {parts.index('') + 1} is empty; give "
                    "comma-separated integers, e.g. 1024,2048"
                )
            try:
                rungs = tuple(int(p) for p in parts)
            except ValueError:
                raise CompileAheadError(
                    f"--ladder must be comma-separated integers or one of "
                    f"{', '.join(NAMED_LADDERS)}, got {text!r}"
                ) from None
        else:
            rungs = tuple(int(r) for r in text)
        return cls(rungs).validate()

    def validate(self) -> Ladder:
        if not self.rungs:
            raise CompileAheadError("the ladder has no rungs")
        for r in self.rungs:
            if r <= 0:
                raise CompileAheadError(f"ladder rung {r} is not positive")
            if r % LADDER_ALIGNMENT:
                raise CompileAheadError(
                    f"ladder rung {r} is not a multiple of {LADDER_ALIGNMENT} (graph alignment)"
                )
        if any(b <= a for a, b in zip(self.rungs, self.rungs[1:], strict=False)):
            raise CompileAheadError(f"ladder rungs must be strictly increasing: {list(self.rungs)}")
        return self

    @classmethod
    def auto(cls, prompt_len: int, maximum: int) -> Ladder:
        """Rungs doubling from the first that holds the prompt (and a token to decode) up to
        ``maximum`` slots, the last rung being the maximum itself (aligned down)."""
        top = maximum - maximum % LADDER_ALIGNMENT
        if top == 0:  # the prompt is not what is too long
            raise CompileAheadError(
                f"--ladder auto: no rung that is a multiple of {LADDER_ALIGNMENT} fits the "
                f"maximum context ({maximum} tokens)"
            )
        if prompt_len + 1 > top:
            raise CompileAheadError(
                f"the prompt ({prompt_len} tokens) leaves no room to decode below the maximum "
                f"context ({maximum})"
            )
        rung = LADDER_ALIGNMENT
        while rung < prompt_len + 1:
            rung *= 2
        rungs = []
        while rung < top:
            rungs.append(rung)
            rung *= 2
        return cls((*rungs, top)).validate()

    @property
    def top(self) -> int:
        return self.rungs[-1]

    def __len__(self) -> int:
        return len(self.rungs)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.rungs)
