"""One value per trial from a compile trial's repeated compiles, by a declared statistic.

A compile trial (trial.py) records every compile of a rung in the rung's "compiles",
warm-up compiles marked; the analysis keeps the measured ones and reduces them with the
statistic: the minimum by default for time and work (interference only ever adds to them, so
the least disturbed compile is the best estimate, as rustc-perf does), the median on request,
and the median always for memory. Results written before compiles were repeated hold one
compile per rung (its wall in "compile_s"), read as a single measured compile.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

STATISTICS: dict[str, Callable[[list[float]], float]] = {
    "min": min,
    "median": statistics.median,
}
TIME_STATISTIC_DEFAULT = "min"

# Compiles per rung in each trial (after one warm-up compile), the minimum kept. Chosen with
# benchmarks/experiments/measurement_power.py on a 2-vCPU VM (docs/results.md, "Measurement
# power"): with three, a 1% change of compile work was visible in 10 pairs; with one it was
# not.
# `--repeat 1` suits compiles that take minutes (an NPU's), where more pairs are the cheaper
# power.
DEFAULT_REPEAT = 3
MEMORY_STATISTIC = "median"


def measured_compiles(rung: dict) -> list[dict]:
    """The rung's compile records the analysis uses (warm-ups left out)."""
    compiles = rung.get("compiles")
    if isinstance(compiles, list):
        return [c for c in compiles if isinstance(c, dict) and not c.get("warmup")]
    if isinstance(rung.get("compile_s"), int | float):  # one compile per rung, no records
        legacy = {"wall_s": rung["compile_s"]}
        if "extension_counters" in rung:
            legacy["extension_counters"] = rung["extension_counters"]
        return [legacy]
    return []


def _number(record: dict, path: tuple[str, ...]) -> float | None:
    node: object = record
    for step in path:
        if not isinstance(node, dict):
            return None
        node = node.get(step)
    if isinstance(node, bool) or not isinstance(node, int | float):
        return None
    return float(node)


def rung_value(rung: dict, path: tuple[str, ...], statistic: str) -> float | None:
    """The statistic over the rung's measured compiles; None when any of them lacks a value."""
    values = [_number(c, path) for c in measured_compiles(rung)]
    if not values or any(v is None for v in values):
        return None
    return STATISTICS[statistic]([v for v in values if v is not None])


def _rungs(result: dict) -> list[dict]:
    rungs = result.get("rungs")
    return [r for r in rungs if isinstance(r, dict)] if isinstance(rungs, list) else []


def rung_getter(
    index: int, path: tuple[str, ...], statistic: str
) -> Callable[[dict], float | None]:
    def get(result: dict) -> float | None:
        rungs = _rungs(result)
        return rung_value(rungs[index], path, statistic) if index < len(rungs) else None

    return get


def total_getter(
    path: tuple[str, ...],
    statistic: str,
    combine: Callable[[list[float]], float] = sum,
) -> Callable[[dict], float | None]:
    """Over the rungs (sum by default; max for a peak): None when any rung lacks a value."""

    def get(result: dict) -> float | None:
        values = [rung_value(r, path, statistic) for r in _rungs(result)]
        present = [v for v in values if v is not None]
        if not values or len(present) < len(values):
            return None
        return float(combine(present))

    return get


def statistic_label(statistic: str, result_repeat: int | None, warmup: int | None) -> str:
    """How a trial's value was made, for the reports (e.g. "min of 5 compiles per trial")."""
    if not result_repeat or result_repeat <= 1:
        text = "one compile per trial"
    else:
        text = f"{statistic} of {result_repeat} compiles per trial"
    if warmup:
        text += f", after {warmup} warm-up compile(s) per rung not used"
    return text


def pass_self_times(result: dict, statistic: str) -> dict[str, dict[str, float]] | None:
    """manager -> pass -> self seconds of the trial: per rung the statistic over its measured
    compiles (a pass absent from a compile took no time there), summed over the rungs; the
    trial's own "pass_self_s" for results without per-compile records; None when the trial did
    not profile passes."""
    rungs = _rungs(result)
    if not rungs or not all(
        c.get("pass_self_s") is not None for r in rungs for c in r.get("compiles", [{}])
    ):
        legacy = result.get("pass_self_s")
        return legacy if isinstance(legacy, dict) else None
    out: dict[str, dict[str, float]] = {}
    reduce = STATISTICS[statistic]
    for rung in rungs:
        compiles = measured_compiles(rung)
        seen = {(m, p) for c in compiles for m, ps in c["pass_self_s"].items() for p in ps}
        for manager, name in seen:
            values = [float(c["pass_self_s"].get(manager, {}).get(name, 0.0)) for c in compiles]
            per = out.setdefault(manager, {})
            per[name] = per.get(name, 0.0) + reduce(values)
    return out
