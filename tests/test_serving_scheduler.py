"""The serving scheduler's decisions, the grid and the ahead policy's order of compiles, as pure
functions: no clock, no device."""

from __future__ import annotations

import pytest

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.serving.buckets import Bucket, Grid, parse_sizes
from compile_ahead.runtime.serving.policies import Ahead, Forecast
from compile_ahead.runtime.serving.scheduler import View, admits, plan, row_moves

GRID = Grid.of((1, 2, 4), (16, 32, 64))
ALL = frozenset(GRID)


def view(active, running=(), queued=(), compiled=ALL, finals=()):
    return View(GRID, active, frozenset(compiled), tuple(running), tuple(queued), tuple(finals))


def test_grid_is_refused_in_one_line_when_it_cannot_hold_a_bucket():
    for batch, caps in [((), (16,)), ((1, 2), ()), ((2, 1), (16,)), ((1,), (0, 16)), ((1,), (1,))]:
        with pytest.raises(CompileAheadError) as err:
            Grid.of(batch, caps)
        assert "\n" not in str(err.value)
    with pytest.raises(CompileAheadError, match="comma-separated integers"):
        parse_sizes("1,two", "--buckets")


def test_grid_fits_the_smallest_bucket_and_steps_up_each_dimension():
    assert GRID.fitting(3, 17) == Bucket(4, 32)
    assert GRID.fitting(5, 1) is None and GRID.fitting(1, 65) is None
    assert GRID.up_batch(Bucket(2, 32)) == Bucket(4, 32)
    assert GRID.up_capacity(Bucket(2, 32)) == Bucket(2, 64)
    assert GRID.up_batch(Bucket(4, 16)) is None and GRID.up_capacity(Bucket(1, 64)) is None
    assert len(list(GRID)) == len(GRID) == 9


def test_first_come_first_served_admission_stops_at_a_head_that_does_not_fit():
    assert admits(Bucket(4, 32), running=[10], queued=[5, 40, 5]) == 1
    assert admits(Bucket(2, 64), running=[10], queued=[5, 5, 5]) == 1
    assert admits(Bucket(2, 64), running=[10, 10], queued=[5]) == 0


def test_every_row_busy_and_requests_waiting_moves_up_a_batch_bucket():
    p = plan(view(Bucket(1, 16), running=[5], queued=[4]))
    assert p.serve_on == Bucket(2, 16) and p.admits == 1


def test_the_longest_row_outgrowing_its_capacity_moves_up_the_ladder():
    p = plan(view(Bucket(2, 16), running=[17, 3]))
    assert p.serve_on == Bucket(2, 32) and p.required is None


def test_nothing_live_is_evicted_a_bucket_must_hold_every_running_row():
    compiled = {Bucket(1, 64), Bucket(2, 16)}
    p = plan(view(Bucket(2, 16), running=[17, 3], compiled=compiled))
    assert p.serve_on is None and p.required == Bucket(2, 32)


def test_a_move_down_waits_for_permission_and_never_to_a_capacity_a_row_will_outgrow():
    v = view(Bucket(4, 64), running=[10])
    assert plan(v, down_ok=False).serve_on == Bucket(4, 64)
    assert plan(v, down_ok=True).serve_on == Bucket(1, 16)
    v = view(Bucket(4, 64), running=[10], finals=[40])
    assert plan(v, down_ok=True).serve_on == Bucket(1, 64)


def test_wanted_and_required_name_what_to_compile():
    p = plan(view(None, queued=[5, 20, 5], compiled=()))
    assert p.serve_on is None
    assert p.required == Bucket(1, 16)  # the queue's head can start
    assert p.wanted == Bucket(4, 32)  # everyone queued
    p = plan(view(Bucket(1, 16), queued=[20], compiled={Bucket(1, 16)}))
    assert p.serve_on is None and p.required == Bucket(1, 32)


def test_rows_that_fit_stay_and_the_others_take_the_lowest_free_rows():
    assert row_moves([0, 3], 4) == {0: 0, 3: 3}
    assert row_moves([1, 3], 2) == {1: 1, 3: 0}
    assert row_moves([2, 3], 2) == {2: 0, 3: 1}


def _forecast(grid: Grid, active: Bucket, lengths, finals, queued=0, wanted=None) -> Forecast:
    return Forecast(
        grid, active, frozenset([active]), frozenset(), tuple(lengths), tuple(finals), queued,
        (3,) * queued, 0.0, 0.0, 0.1, 1.0, wanted,
    )  # fmt: skip


def test_ahead_orders_its_background_compiles_by_who_waits_for_them():
    grid = Grid.of((1, 2, 4), (16, 32, 64))
    ahead = Ahead()
    # a row reaching 16 in 5 steps (0.5 s, within two compiles) that will need 32: first
    near = _forecast(grid, Bucket(2, 16), [11, 4], [30, 8])
    assert ahead.in_background(near)[0] == Bucket(2, 32)
    # the same with requests queued beyond the free rows: one compile serves both needs
    queued = _forecast(grid, Bucket(2, 16), [11, 4], [30, 8], queued=2, wanted=Bucket(4, 16))
    assert ahead.in_background(queued)[:2] == [Bucket(4, 32), Bucket(4, 16)]
    # a smaller wanted bucket only saves padding: after even a capacity needed in 2.9 s
    down = _forecast(grid, Bucket(4, 32), [3], [60], wanted=Bucket(1, 32))
    assert ahead.in_background(down) == [Bucket(4, 64), Bucket(1, 32)]
