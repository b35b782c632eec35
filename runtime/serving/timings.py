"""Where a serving engine's time went, in bounded sums: what the simulator's cost model is
fitted from (``calibration``).

- per bucket, and apart for the steps taken while a background compile ran: the decode steps
  (the executor's ``step``) and the engine's own work in the iterations that stepped
  (planning, admitting, events, taking in a finished compile), each a count and a sum;
- the prefills, apart the same way, as the sums a least-squares line of seconds against
  prompt tokens needs.

Compiles and bucket switches are in the engine's own records (``EngineStats.compiles``,
``EngineStats.switches``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compile_ahead.runtime.serving.buckets import Bucket


@dataclass
class StepSums:
    n: int = 0
    step_s: float = 0.0  # the executor's decode steps
    engine_s: float = 0.0  # the engine's own work in the same iterations

    def to_json(self) -> dict:
        return {"n": self.n, "step_s": self.step_s, "engine_s": self.engine_s}


@dataclass
class LineSums:
    """Sums for a least-squares line y = a + b*x."""

    n: int = 0
    x: float = 0.0
    y: float = 0.0
    xx: float = 0.0
    xy: float = 0.0

    def add(self, x: float, y: float) -> None:
        self.n += 1
        self.x += x
        self.y += y
        self.xx += x * x
        self.xy += x * y

    def to_json(self) -> dict:
        return {"n": self.n, "x": self.x, "y": self.y, "xx": self.xx, "xy": self.xy}


BACKGROUND = "+background"  # the suffix of a bucket's steps taken beside a background compile


def _key(bucket: Bucket, background: bool) -> str:
    return bucket.key + (BACKGROUND if background else "")


@dataclass
class Timings:
    steps: dict[str, StepSums] = field(default_factory=dict)  # "BxC" or "BxC+background"
    prefill: dict[str, LineSums] = field(default_factory=dict)  # "alone" / "background"

    def step(self, bucket: Bucket, background: bool, seconds: float) -> None:
        sums = self.steps.setdefault(_key(bucket, background), StepSums())
        sums.n += 1
        sums.step_s += seconds

    def engine_work(self, bucket: Bucket, background: bool, seconds: float) -> None:
        self.steps.setdefault(_key(bucket, background), StepSums()).engine_s += max(seconds, 0.0)

    def prefilled(self, tokens: int, background: bool, seconds: float) -> None:
        self.prefill.setdefault("background" if background else "alone", LineSums()).add(
            tokens, seconds
        )

    def to_json(self) -> dict:
        return {
            "steps": {k: v.to_json() for k, v in sorted(self.steps.items())},
            "prefill": {k: v.to_json() for k, v in sorted(self.prefill.items())},
        }
