"""The trace a serving experiment replays: a request file as given, or one the seeded generator
(runtime/serving/workloads.py) draws from a seed, a count, an arrival process and length
distributions. `ab serve` writes it once into the results directory and every trial replays
that copy; benchmarks/serving/policies_paired.py draws one per seed the same way."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.serving.requests import Request
from compile_ahead.runtime.serving.workloads import (
    MAX_REQUESTS,
    Arrivals,
    Lengths,
    generate_requests,
)

LENGTH_KINDS = ("fixed", "uniform", "lognormal")
ARRIVAL_KINDS = ("poisson", "gamma")


def default_prompt_lengths(top: int) -> Lengths:
    """Prompts uniform over 4 .. a quarter of the top capacity (at least 1 token)."""
    return Lengths("uniform", min(4, max(1, top // 4)), max(1, top // 4))


def default_output_lengths(top: int) -> Lengths:
    """Outputs uniform over 8 .. half the top capacity (cut to fit by the generator)."""
    return Lengths("uniform", min(8, max(1, top // 2)), max(1, top // 2))


def parse_lengths(text: str, flag: str) -> Lengths:
    """KIND:A[:B] as the flag gives it: fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA;
    refused in one line naming the flag."""
    kind, *values = text.split(":")
    want = {"fixed": 1, "uniform": 2, "lognormal": 2}.get(kind)
    shape = "fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA"
    if want is None or len(values) != want:
        raise CompileAheadError(f"{flag} {text!r}: give {shape}")
    try:
        numbers = [float(v) for v in values]
    except ValueError:
        raise CompileAheadError(f"{flag} {text!r}: give {shape} with numbers") from None
    if not all(0 < n < 1e9 for n in numbers):
        raise CompileAheadError(f"{flag} {text!r}: its numbers must be positive and finite")
    if kind == "uniform" and numbers[0] > numbers[1]:
        raise CompileAheadError(f"{flag} {text!r}: LO is above HI")
    return Lengths(kind, numbers[0], numbers[1] if len(numbers) > 1 else 0.0)


def lengths_text(lengths: Lengths) -> str:
    """A distribution as parse_lengths reads it back."""
    if lengths.kind == "fixed":
        return f"fixed:{lengths.a:g}"
    return f"{lengths.kind}:{lengths.a:g}:{lengths.b:g}"


@dataclass(frozen=True)
class GeneratedTrace:
    """What the generator draws a trace from; the same values draw the same requests."""

    seed: int
    count: int
    arrivals: Arrivals
    prompt: Lengths
    output: Lengths

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_REQUESTS:
            raise CompileAheadError(
                f"a generated trace holds 1 to {MAX_REQUESTS} requests, not {self.count}"
            )
        a = self.arrivals
        if a.kind not in ARRIVAL_KINDS:
            raise CompileAheadError(f"arrivals {a.kind!r}: one of {', '.join(ARRIVAL_KINDS)}")
        if not 0 < a.rate < 1e9 or not 0 < a.cv < 1e3:
            raise CompileAheadError(
                f"the arrival rate ({a.rate:g}/s) and its gaps' coefficient of variation "
                f"({a.cv:g}) must be positive and finite"
            )

    def requests(self, vocab_size: int, max_slots: int) -> list[Request]:
        """The trace: each request's prompt plus output within ``max_slots``, prompt ids
        uniform over the vocabulary."""
        return generate_requests(
            self.seed, self.count, self.arrivals, self.prompt, self.output, vocab_size,
            max_slots=max_slots,
        )  # fmt: skip

    def to_json(self) -> dict:
        return {
            "seed": self.seed,
            "count": self.count,
            "arrivals": self.arrivals.to_json(),
            "prompt_lengths": lengths_text(self.prompt),
            "output_lengths": lengths_text(self.output),
        }

    def describe(self) -> str:
        a = self.arrivals
        process = f"poisson at {a.rate:g}/s" if a.kind == "poisson" else (
            f"gamma at {a.rate:g}/s, cv {a.cv:g}"
        )  # fmt: skip
        return (
            f"{self.count} generated requests (seed {self.seed}; {process}; prompts "
            f"{lengths_text(self.prompt)}, outputs {lengths_text(self.output)} tokens)"
        )


def digest(data: bytes) -> str:
    """The trace file's identity (experiment.json keeps it: runs of one trace pool)."""
    return hashlib.sha256(data).hexdigest()
