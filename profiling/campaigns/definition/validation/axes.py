"""The values each axis of a campaign takes, checked before any cell is made (one line each)."""

from __future__ import annotations

import json
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.ladder.settings.batch_bound import MAX_BATCH, check_batch_size

# Axes that only schedule experiments (`ab schedule`, `ab baselines`) take.
SCHEDULE_ONLY_AXES = ("batch",)


def _string(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _properties(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(i, str) for i in value)


def _batch(value: object) -> bool:
    # TOML's true is not a batch of one, nor 1.5 or "4" a batch at all (range: _check_bounds)
    return isinstance(value, int) and not isinstance(value, bool)


_CHECKS = {"ov_config": _properties, "batch": _batch}
_WHAT = {
    "ov_config": "lists of KEY=VALUE strings",
    "batch": f"integers in 1..{MAX_BATCH} (sequences per trial, e.g. [1, 2, 4, 8])",
}


def _check_bounds(axis: str, values: list, path: Path) -> None:
    """Each batch within the bound `run` and `ab` hold every B to (batch_bound.py): one line
    here, before the store or a block's folder exists, not a cell that runs and hangs."""
    if axis == "batch":
        for value in values:
            try:
                check_batch_size(value, f"axis {axis}")
            except CompileAheadError as err:
                raise CompileAheadError(f"{path}: {err}") from None


def check_axis_values(axis: str, values: object, path: Path) -> list:
    """The axis's values: a non-empty list of what the axis takes, none twice."""
    if not isinstance(values, list):
        raise CompileAheadError(f"{path}: axis {axis} must be a list of values")
    if not values:
        raise CompileAheadError(f"{path}: axis {axis} is empty: the grid has no cell")
    good = _CHECKS.get(axis, _string)
    bad = next((v for v in values if not good(v)), None)
    if bad is not None:  # TOML has no null: None is no value's
        what = _WHAT.get(axis, "non-empty strings")
        raise CompileAheadError(f"{path}: axis {axis} takes {what}, got {json.dumps(bad)}")
    _check_bounds(axis, values, path)
    if len({json.dumps(v) for v in values}) != len(values):
        raise CompileAheadError(f"{path}: axis {axis} names a value twice")
    return values


def check_axes_for_kind(axes: dict[str, list], kind: str, path: Path) -> None:
    """Axes a kind of campaign cannot vary are refused by name."""
    for axis in SCHEDULE_ONLY_AXES:
        if axis in axes and kind == "compile":
            raise CompileAheadError(
                f"{path}: axis {axis} is for schedule and baselines campaigns (`ab schedule "
                f"--{axis}`); compile campaigns compile one sequence's graphs"
            )
