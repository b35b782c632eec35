"""Counterbalanced run orders: AB/BA alternation for two arms, Williams designs for k arms.

A design is a list of blocks; each block runs every arm once, in the order of one sequence of
the design. A Williams design is a Latin square (each arm once in each position) in which every
arm is immediately preceded by every other arm equally often (first-order carry-over balance).
For even k one square of k sequences does it; for odd k it takes the square and its mirror image
(2k sequences). Balance is exact when the number of blocks is a multiple of the number of
sequences; otherwise the plan says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from compile_ahead.errors import CompileAheadError


def williams_sequences(k: int) -> list[list[int]]:
    """Sequences of arm indices 0..k-1 forming a Williams design (k for even k, 2k for odd)."""
    if k < 1:
        raise CompileAheadError(f"a design needs at least one arm, got {k}")
    # First sequence zig-zags: 0, 1, k-1, 2, k-2, ...; the others shift it cyclically.
    first: list[int] = [0]
    low, high = 1, k - 1
    take_low = True
    while len(first) < k:
        if take_low:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
        take_low = not take_low
    square = [[(arm + shift) % k for arm in first] for shift in range(k)]
    if k % 2 == 1 and k > 1:
        square += [list(reversed(row)) for row in square]
    return square


def alternation(blocks: int) -> list[list[int]]:
    """Two arms: AB, BA, AB, ... (the k=2 Williams design, repeated)."""
    return [[0, 1] if b % 2 == 0 else [1, 0] for b in range(blocks)]


@dataclass(frozen=True)
class TrialSlot:
    index: int  # position in the whole run order, warm-ups included
    block: int  # measured block number (0-based); -1 for warm-up trials
    position: int  # position of the arm inside its block
    arm: int  # arm index (0 = control)
    warmup: bool


@dataclass(frozen=True)
class Plan:
    arms: tuple[str, ...]
    blocks: tuple[tuple[int, ...], ...]  # arm order of each measured block
    warmup_per_arm: int

    @property
    def slots(self) -> list[TrialSlot]:
        out: list[TrialSlot] = []
        for _ in range(self.warmup_per_arm):
            for arm in range(len(self.arms)):
                out.append(TrialSlot(len(out), -1, arm, arm, True))
        for b, order in enumerate(self.blocks):
            for pos, arm in enumerate(order):
                out.append(TrialSlot(len(out), b, pos, arm, False))
        return out

    def position_counts(self) -> dict[int, Counter[int]]:
        """arm -> how often it ran at each block position."""
        counts: dict[int, Counter[int]] = {a: Counter() for a in range(len(self.arms))}
        for order in self.blocks:
            for pos, arm in enumerate(order):
                counts[arm][pos] += 1
        return counts

    def carryover_counts(self) -> Counter[tuple[int, int]]:
        """(predecessor, successor) -> count, within blocks."""
        pairs: Counter[tuple[int, int]] = Counter()
        for order in self.blocks:
            pairs.update(pairwise(order))
        return pairs

    @property
    def position_balanced(self) -> bool:
        counts = self.position_counts()
        k = len(self.arms)
        values = {counts[a][p] for a in range(k) for p in range(k)}
        return len(values) == 1

    @property
    def carryover_balanced(self) -> bool:
        k = len(self.arms)
        if k < 2:
            return True
        pairs = self.carryover_counts()
        values = {pairs[(a, b)] for a in range(k) for b in range(k) if a != b}
        return len(values) == 1

    def describe(self) -> dict:
        names = self.arms
        return {
            "arms": list(names),
            "kind": "AB/BA alternation" if len(names) == 2 else "Williams",
            "blocks": [[names[a] for a in order] for order in self.blocks],
            "warmup_per_arm": self.warmup_per_arm,
            "position_balanced": self.position_balanced,
            "carryover_balanced": self.carryover_balanced,
        }


def make_plan(
    arms: Sequence[str], blocks: int, warmup_per_arm: int = 1, first_block: int = 0
) -> Plan:
    """Blocks cycle through the design's sequences: block b uses sequence b mod len(design).
    ``first_block`` starts the run at that block of the design (a campaign runs one block of a
    cell at a time, each in the order the whole cell's design gives it).

    Warm-up policy: ``warmup_per_arm`` unmeasured trials of each arm run first (arm order), so
    one-time costs shared by all arms (page cache of the model files, lazy imports on disk) do
    not land on whichever arm happens to go first. Each trial is its own process either way.
    """
    if len(arms) < 2:
        raise CompileAheadError(f"an A/B trial needs at least two arms, got {len(arms)}")
    if len(set(arms)) != len(arms):
        raise CompileAheadError(f"arm names must be distinct, got {', '.join(arms)}")
    if blocks < 1:
        raise CompileAheadError(f"--pairs must be at least 1, got {blocks}")
    if warmup_per_arm < 0:
        raise CompileAheadError(f"--warmup must be 0 or more, got {warmup_per_arm}")
    if first_block < 0:
        raise CompileAheadError(f"--first-block must be 0 or more, got {first_block}")
    k = len(arms)
    design = alternation(first_block + blocks) if k == 2 else williams_sequences(k)
    orders = tuple(tuple(design[(first_block + b) % len(design)]) for b in range(blocks))
    return Plan(tuple(arms), orders, warmup_per_arm)
