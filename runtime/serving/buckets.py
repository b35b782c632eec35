"""The serving grid: static buckets [B, C], a batch size B (rows that decode together) times a
capacity C of the ladder (KV slots each row may hold). Every bucket is one compiled decode
graph; the engine serves from one active bucket at a time and moves between them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from compile_ahead.errors import CompileAheadError


class Bucket(NamedTuple):
    batch: int  # B: rows
    capacity: int  # C: KV slots per row

    def holds(self, rows: int, length: int) -> bool:
        """Whether ``rows`` sequences, the longest needing ``length`` slots, fit."""
        return rows <= self.batch and length <= self.capacity

    @property
    def key(self) -> str:
        """ "BxC": how a cost model's table and a report's timings name the bucket."""
        return f"{self.batch}x{self.capacity}"

    def __str__(self) -> str:
        return f"[{self.key}]"


@dataclass(frozen=True)
class Grid:
    """Batch sizes x capacities, both strictly increasing."""

    batch_sizes: tuple[int, ...]
    capacities: tuple[int, ...]

    def __post_init__(self) -> None:
        for name, values in (("batch sizes", self.batch_sizes), ("capacities", self.capacities)):
            if not values:
                raise CompileAheadError(f"the serving grid has no {name}")
            if any(v < 1 for v in values):
                raise CompileAheadError(f"the serving grid's {name} must be positive: {values}")
            if list(values) != sorted(set(values)):
                raise CompileAheadError(
                    f"the serving grid's {name} must be strictly increasing: {values}"
                )
        if self.capacities[-1] < 2:
            raise CompileAheadError(
                "the serving grid's top capacity must hold a prompt token and a new one"
            )

    @classmethod
    def of(cls, batch_sizes: Iterable[int], capacities: Iterable[int]) -> Grid:
        return cls(tuple(batch_sizes), tuple(capacities))

    @property
    def smallest(self) -> Bucket:
        return Bucket(self.batch_sizes[0], self.capacities[0])

    @property
    def largest(self) -> Bucket:
        return Bucket(self.batch_sizes[-1], self.capacities[-1])

    @property
    def top_capacity(self) -> int:
        return self.capacities[-1]

    @property
    def top_batch(self) -> int:
        return self.batch_sizes[-1]

    def __iter__(self) -> Iterator[Bucket]:
        """Every bucket, smallest first (by B, then C)."""
        return (Bucket(b, c) for b in self.batch_sizes for c in self.capacities)

    def __len__(self) -> int:
        return len(self.batch_sizes) * len(self.capacities)

    def __contains__(self, bucket: object) -> bool:
        return (
            isinstance(bucket, tuple)
            and len(bucket) == 2
            and bucket[0] in self.batch_sizes
            and bucket[1] in self.capacities
        )

    def batch_for(self, rows: int) -> int | None:
        """The smallest batch size holding ``rows`` rows; None beyond the top."""
        return next((b for b in self.batch_sizes if b >= rows), None)

    def capacity_for(self, length: int) -> int | None:
        """The smallest capacity holding ``length`` slots; None beyond the top."""
        return next((c for c in self.capacities if c >= length), None)

    def fitting(self, rows: int, length: int) -> Bucket | None:
        """The smallest bucket holding ``rows`` rows of up to ``length`` slots, or None."""
        b, c = self.batch_for(max(rows, 1)), self.capacity_for(max(length, 1))
        return None if b is None or c is None else Bucket(b, c)

    def up_batch(self, bucket: Bucket) -> Bucket | None:
        """The next batch size up at the same capacity, or None at the top."""
        i = self.batch_sizes.index(bucket.batch)
        return (
            Bucket(self.batch_sizes[i + 1], bucket.capacity)
            if i + 1 < len(self.batch_sizes)
            else None
        )

    def up_capacity(self, bucket: Bucket) -> Bucket | None:
        """The next capacity up at the same batch size, or None at the top."""
        i = self.capacities.index(bucket.capacity)
        return (
            Bucket(bucket.batch, self.capacities[i + 1]) if i + 1 < len(self.capacities) else None
        )

    def to_json(self) -> dict:
        return {"batch_sizes": list(self.batch_sizes), "capacities": list(self.capacities)}


def parse_sizes(text: str, what: str) -> tuple[int, ...]:
    """A comma-separated list of positive integers (--buckets, --ladder), refused in one line."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise CompileAheadError(f"{what} takes comma-separated integers, got {text!r}") from None
    if not values:
        raise CompileAheadError(f"{what} is empty")
    return values
