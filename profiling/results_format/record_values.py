"""The numbers of a trial record, checked where a record is read (a trial log's line, a
campaign store's row): a record holding a number that is not finite (NaN, Infinity, 1e999 or
an integer past the float range), or something else than a number where its name says a
measure (``"compile_s": "abc"``), is not a valid trial. Such a trial is left out of every
statistic, and the reader names it (file and line, or store row).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

# A key ending so names a measure: its value is a number, null, or lists and objects of them.
MEASURE_SUFFIXES = ("_s", "_ns", "_us", "_ms", "_bytes", "_pct")
# The record's own measures (the trial's result is checked as above).
RECORD_NUMBERS = ("wall_s", "started_unix")


def _is_measure(key: object) -> bool:
    return isinstance(key, str) and key.endswith(MEASURE_SUFFIXES)


def _bad_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, int):
        try:
            float(value)
        except OverflowError:
            return True
    return False


def _problem(node: object, where: str, measure: bool) -> str | None:
    """Where below ``node`` a number is not finite, or a measure is not a number."""
    if _bad_number(node):
        return f"{where} is not a finite number ({str(node)[:20]})"
    if isinstance(node, Mapping):
        for key, value in node.items():
            found = _problem(value, f"{where}.{key}", measure or _is_measure(key))
            if found:
                return found
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found = _problem(value, f"{where}[{i}]", measure)
            if found:
                return found
    elif measure and (isinstance(node, str | bool)):
        return f"{where} is not a number ({str(node)[:20]!r})"
    return None


def record_problem(record: Mapping[str, object]) -> str | None:
    """What makes this trial record (a parsed line of trials.jsonl, result included) invalid,
    in a few words naming the field; None when its numbers are all finite."""
    for key in RECORD_NUMBERS:
        value = record.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or _bad_number(value):
            return f"{key} is not a finite number ({str(value)[:20]!r})"
    return _problem(record.get("result"), "result", False)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def _no_constant(text: str) -> float:
    raise ValueError(f"{text} is not a finite number")


def loads_finite(text: str) -> object:
    """``json.loads`` that refuses NaN, Infinity and numbers past the float range
    (ValueError), for files whose numbers are copied into outputs as they are."""
    return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
