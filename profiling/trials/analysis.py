"""From trial records to paired comparisons: endpoints per arm per block, each treatment arm
paired with the control arm (the first) inside the same block; each comparison judged
(power.py), and an endpoint no trial of an arm could measure kept as unavailable, with the
reason its trials give."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials.design import Plan
from compile_ahead.profiling.trials.power import Judgement, judge
from compile_ahead.profiling.trials.runner import TrialRecord
from compile_ahead.profiling.trials.stats import (
    Better,
    NonFiniteStatistic,
    PairedSummary,
    paired_summary,
)

Getter = Callable[[dict], float | None]
# why a trial result has no value for an endpoint (None: it has one, or no reason is known)
Reason = Callable[[dict], str | None]


@dataclass(frozen=True)
class Endpoint:
    key: str
    label: str
    unit: str  # unit of the values the getter returns: "s", "bytes", "tok/s", ...
    better: Better
    get: Getter
    statistic: str | None = None  # how a trial's repeated values become one (e.g. "min of 3")
    reason: Reason | None = None

    def describe(self) -> dict:
        out = {"key": self.key, "label": self.label, "unit": self.unit, "better": self.better}
        if self.statistic is not None:
            out["statistic"] = self.statistic
        return out


def result_field(*path: str | int) -> Getter:
    """Getter for a nested field; None when missing or not a number."""

    def get(result: dict) -> float | None:
        node: object = result
        for step in path:
            try:
                node = node[step]  # type: ignore[index]
            except (KeyError, IndexError, TypeError):
                return None
        if isinstance(node, bool) or not isinstance(node, int | float):
            return None
        return float(node)

    return get


@dataclass(frozen=True)
class Tally:
    """A count-style row (e.g. boundaries ready, top-1 agreement): text per arm, no test."""

    label: str
    per_arm: dict[str, str]
    effect: str = ""


@dataclass
class Analysis:
    plan: Plan
    endpoints: list[Endpoint]
    # endpoint key -> arm -> value per measured block (None where missing)
    values: dict[str, dict[str, list[float | None]]]
    # endpoint key -> treatment arm -> paired summary vs the control (None: < 1 complete pair)
    comparisons: dict[str, dict[str, PairedSummary | None]]
    tallies: list[Tally] = field(default_factory=list)
    # endpoint key -> treatment -> detected / noise floor / flagged (power.judge)
    judgements: dict[str, dict[str, Judgement | None]] = field(default_factory=dict)
    # endpoint key -> arm -> why none of its trials has a value (never reported as 0)
    unavailable: dict[str, dict[str, str]] = field(default_factory=dict)
    aa_arms: tuple[str, ...] = ()  # arms that run the control again (the noise reference)
    # The endpoint a reader looks at first (ab compile's default endpoint) and why it is that one
    headline: str | None = None
    headline_rule: str = ""

    @property
    def control(self) -> str:
        return self.plan.arms[0]

    @property
    def treatments(self) -> tuple[str, ...]:
        return self.plan.arms[1:]


def block_results(records: Sequence[TrialRecord], plan: Plan) -> dict[str, list[dict | None]]:
    """arm -> result per measured block (None where the trial is missing or failed)."""
    out: dict[str, list[dict | None]] = {a: [None] * len(plan.blocks) for a in plan.arms}
    for r in records:
        if not r.warmup and not 0 <= r.block < len(plan.blocks):
            raise CompileAheadError(
                f"trial {r.index} ({r.arm}) is in block {r.block}, but the experiment plans "
                f"{len(plan.blocks)} pairs: its trial log and experiment.json do not belong "
                "together"
            )
        if not r.warmup and r.error is None and r.result is not None and r.arm in out:
            out[r.arm][r.block] = r.result
    return out


def _unavailable(
    ep: Endpoint, per_block: dict[str, list[dict | None]], values: dict[str, list]
) -> dict[str, str]:
    """arm -> reason, for the arms where the endpoint has no value in any trial that ran."""
    out: dict[str, str] = {}
    for arm, results in per_block.items():
        ran = [r for r in results if r is not None]
        if not ran or any(v is not None for v in values[arm]):
            continue
        reasons = sorted({ep.reason(r) or "" for r in ran} - {""}) if ep.reason else []
        out[arm] = "; ".join(reasons) or "no trial recorded a value"
    return out


def _finite(value: float | None) -> float | None:
    """A getter's value, None when it is not a finite number (a sum past the float range)."""
    return value if value is not None and math.isfinite(value) else None


def _compare(pairs: list[tuple[float, float]], better: Better) -> PairedSummary | None:
    if not pairs:
        return None
    try:
        return paired_summary([a for a, _ in pairs], [b for _, b in pairs], better)
    except NonFiniteStatistic:
        return None


def analyse(
    records: Sequence[TrialRecord],
    plan: Plan,
    endpoints: Sequence[Endpoint],
    aa_arms: tuple[str, ...] = (),
) -> Analysis:
    per_block = block_results(records, plan)
    unavailable: dict[str, dict[str, str]] = {}
    values: dict[str, dict[str, list[float | None]]] = {}
    comparisons: dict[str, dict[str, PairedSummary | None]] = {}
    control = plan.arms[0]
    for ep in endpoints:
        values[ep.key] = {
            arm: [None if res is None else _finite(ep.get(res)) for res in per_block[arm]]
            for arm in plan.arms
        }
        missing = _unavailable(ep, per_block, values[ep.key])
        if missing:
            unavailable[ep.key] = missing
        comparisons[ep.key] = {}
        for arm in plan.arms[1:]:
            pairs = [
                (a, b)
                for a, b in zip(values[ep.key][control], values[ep.key][arm], strict=True)
                if a is not None and b is not None
            ]
            summary = _compare(pairs, ep.better)
            comparisons[ep.key][arm] = summary
            if pairs and summary is None:
                unavailable.setdefault(ep.key, {})[arm] = "its values are past the float range"
    judgements = judge(comparisons, aa_arms)
    return Analysis(
        plan, list(endpoints), values, comparisons, [], judgements, unavailable, aa_arms
    )
