"""Counterbalancing properties of the trial designs."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials.design import Plan, alternation, make_plan, williams_sequences


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6])
def test_williams_is_a_latin_square_with_balanced_carry_over(k: int) -> None:
    seqs = williams_sequences(k)
    assert len(seqs) == (k if k % 2 == 0 else 2 * k)
    for seq in seqs:
        assert sorted(seq) == list(range(k))
    positions = Counter((arm, pos) for seq in seqs for pos, arm in enumerate(seq))
    assert set(positions.values()) == {len(seqs) // k}
    assert len(positions) == k * k
    carry = Counter(p for seq in seqs for p in pairwise(seq))
    expected = {(a, b) for a in range(k) for b in range(k) if a != b}
    assert set(carry) == expected  # no arm follows itself, every ordered pair occurs
    assert len(set(carry.values())) == 1  # ... equally often


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6])
def test_plan_properties_agree_with_direct_counts(k: int) -> None:
    arms = [f"arm{i}" for i in range(k)]
    n_seq = k if k % 2 == 0 else 2 * k
    plan = make_plan(arms, 2 * n_seq, warmup_per_arm=0)
    assert plan.position_balanced and plan.carryover_balanced
    short = make_plan(arms, n_seq + 1, warmup_per_arm=0)
    assert not short.position_balanced  # one extra block breaks the balance, and it says so


def test_two_arms_alternate() -> None:
    assert alternation(4) == [[0, 1], [1, 0], [0, 1], [1, 0]]
    plan = make_plan(["A", "B"], 4)
    assert [list(b) for b in plan.blocks] == alternation(4)
    assert plan.position_balanced and plan.carryover_balanced
    five = make_plan(["i1", "i2"], 5)
    assert five.position_counts()[0] == Counter({0: 3, 1: 2})
    assert not five.position_balanced


def test_warmups_come_first_and_are_marked() -> None:
    plan = make_plan(["A", "B", "C"], 3, warmup_per_arm=2)
    slots = plan.slots
    assert len(slots) == 2 * 3 + 3 * 3
    assert all(s.warmup and s.block == -1 for s in slots[:6])
    assert [s.arm for s in slots[:6]] == [0, 1, 2, 0, 1, 2]
    measured = slots[6:]
    assert not any(s.warmup for s in measured)
    assert [s.index for s in slots] == list(range(len(slots)))
    for block in range(3):
        arms = [s.arm for s in measured if s.block == block]
        assert sorted(arms) == [0, 1, 2]


def test_bad_plans_are_refused() -> None:
    with pytest.raises(CompileAheadError, match="at least two arms"):
        make_plan(["A"], 3)
    with pytest.raises(CompileAheadError, match="distinct"):
        make_plan(["A", "A"], 3)
    with pytest.raises(CompileAheadError, match="--pairs"):
        make_plan(["A", "B"], 0)
    with pytest.raises(CompileAheadError, match="--warmup"):
        make_plan(["A", "B"], 2, warmup_per_arm=-1)


def test_unbalanced_handmade_plan_is_detected() -> None:
    plan = Plan(("A", "B", "C"), ((0, 1, 2), (0, 1, 2), (0, 1, 2)), 0)
    assert not plan.position_balanced and not plan.carryover_balanced
