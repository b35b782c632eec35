"""What `ab compile` measures and tests: per compile, per pass, and the endpoint the
experiment leads with (instructions where every arm counted them, else the compile wall)."""

from __future__ import annotations

from collections.abc import Sequence

from compile_ahead.profiling.trials.analysis import (
    Analysis,
    Endpoint,
    Getter,
    Reason,
    result_field,
)
from compile_ahead.profiling.trials.compile_kind import trial_values as cv
from compile_ahead.profiling.trials.compile_kind.exported_rungs import MeasureOptions


def _sum_rungs(*path: str) -> Getter:
    def get(result: dict) -> float | None:
        rungs = result.get("rungs")
        if not isinstance(rungs, list) or not rungs:
            return None
        values = [result_field(*path)(r) for r in rungs]
        present = [v for v in values if v is not None]
        return None if len(present) < len(values) else sum(present)

    return get


def measure_reason(measure: str) -> Reason:
    """Why a trial has no value of ``measure``: its own record of the measure's availability."""

    def reason(result: dict) -> str | None:
        measures = result.get("measures")
        if not isinstance(measures, dict):
            return "not measured by this trial (recorded before the measure existed)"
        entry = measures.get(measure)
        if isinstance(entry, dict) and not entry.get("available", True):
            return str(entry.get("reason") or "unavailable")
        return None

    return reason


def _first_of(*getters: Getter) -> Getter:
    def get(result: dict) -> float | None:
        return next((v for g in getters if (v := g(result)) is not None), None)

    return get


# key, label, unit, compile-record field, measure name (for the reason when unavailable)
_PER_COMPILE = (
    ("cpu_total", "Compile CPU time (user+sys, all threads), all rungs", "s", "cpu_s", "cpu"),
    ("instructions_total", "Instructions (user), all rungs", "instructions", "instructions",
     "instructions"),
    ("cycles_total", "Cycles (user), all rungs", "cycles", "cycles", "cycles"),
)  # fmt: skip


# The endpoint a compile A/B leads with: named in the report's header and first among its
# verdicts, marked on the compare page (release histories draw the compile wall). Where every
# arm counted instructions:u (a machine with a PMU the kernel exposes), instructions: they vary
# least between runs, as frequency and other tenants do not move them (rustc-perf's and LLVM's
# compile-time tracker's default). Without counters, the compile wall, chosen with
# benchmarks/experiments/measurement_power.py on a 2-vCPU VM (docs/results.md, "Measurement power").
COUNTERS_DEFAULT = "instructions_total"
NO_COUNTERS_DEFAULT = "compile_total"
NO_COUNTERS_WHY = (
    "the compile wall, which saw calibrated changes at least as often as CPU time; a serial "
    "pass's saving is a larger share of the wall than of a multi-threaded compile's CPU time"
)


def default_endpoint(analysis: Analysis) -> tuple[str, str]:
    """The key of ``analysis``'s default endpoint and the rule that chose it."""
    keys = {ep.key for ep in analysis.endpoints}
    if COUNTERS_DEFAULT in keys and COUNTERS_DEFAULT not in analysis.unavailable:
        counted = analysis.values[COUNTERS_DEFAULT]
        if all(any(v is not None for v in per_arm) for per_arm in counted.values()):
            return COUNTERS_DEFAULT, "instructions:u, counted by every arm"
    return NO_COUNTERS_DEFAULT, f"no instruction counts: {NO_COUNTERS_WHY}"


def compile_endpoints(
    ladder: Sequence[int],
    pass_profile: bool,
    counters: bool = False,
    measure: MeasureOptions | None = None,
) -> list[Endpoint]:
    m = measure or MeasureOptions()
    stat = m.statistic
    label = cv.statistic_label(stat, m.repeat, m.compile_warmup)
    mem_label = cv.statistic_label(cv.MEMORY_STATISTIC, m.repeat, m.compile_warmup)
    wall = ("wall_s",)
    eps = [
        Endpoint(f"compile_{c}", f"Compile wall C={c}", "s", "lower",
                 cv.rung_getter(i, wall, stat), label, measure_reason("wall"))
        for i, c in enumerate(ladder)
    ]  # fmt: skip
    eps.append(Endpoint("compile_total", "Compile wall, all rungs", "s", "lower",
                        cv.total_getter(wall, stat), label, measure_reason("wall")))  # fmt: skip
    for key, text, unit, field_name, name in _PER_COMPILE:
        getter = cv.total_getter((field_name,), stat)
        eps.append(Endpoint(key, text, unit, "lower", getter, label, measure_reason(name)))
    peak = cv.total_getter(("peak_rss_bytes",), cv.MEMORY_STATISTIC, max)
    eps.append(Endpoint("compile_peak_rss", "Peak RSS during compile_model, max over rungs",
                        "bytes", "lower", peak, mem_label, measure_reason("peak_rss")))  # fmt: skip
    read = result_field("total_read_s")
    eps.append(Endpoint("read_total", "IR read, all rungs", "s", "lower", read))
    if pass_profile:
        eps += _pass_endpoints(stat, label)
    if counters:
        itt = _first_of(
            cv.total_getter(("extension_counters", "itt_compile_model_s"), stat),
            _sum_rungs("extension_counters", "itt_compile_model_s"),
        )
        eps.append(Endpoint("itt_compile", "ITT 'Compile model' region", "s", "lower", itt, label))
    rss = result_field("max_rss_bytes")
    eps.append(Endpoint("max_rss", "Peak RSS of the trial", "bytes", "lower", rss))
    wall_trial = result_field("trial_wall_s")
    eps.append(Endpoint("process_wall", "Trial process wall", "s", "lower", wall_trial))
    return eps


def _pass_endpoints(stat: str, label: str) -> list[Endpoint]:
    transformations = _first_of(
        cv.total_getter(("transformations_s",), stat), result_field("total_transformations_s")
    )

    def self_sum(result: dict) -> float | None:
        """Every pass's self time of a trial, summed (the managers' own overhead left out)."""
        per_manager = cv.pass_self_times(result, stat)
        if per_manager is None:
            return None
        return sum(sum(passes.values()) for passes in per_manager.values())

    reason = measure_reason("pass_self")
    return [
        Endpoint("transformations", "Transformation passes (in compile_model)", "s", "lower",
                 transformations, label, reason),
        Endpoint("pass_self_total", "Pass self time, all passes", "s", "lower", self_sum, label,
                 reason),
    ]  # fmt: skip
