"""Markdown table in the seed's shape (Endpoint | A | B | Paired effect) and the JSON record."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from compile_ahead.output.atomic import write_bytes_atomic
from compile_ahead.output.format_version import stamped
from compile_ahead.profiling.trials.analysis import Analysis, Endpoint
from compile_ahead.profiling.trials.power import FLAG_RULE, Judgement
from compile_ahead.profiling.trials.runner import Arm, TrialRecord
from compile_ahead.profiling.trials.stats import MDE_POWER, PairedSummary

MINUS = "\u2212"

# unit -> (display unit, divisor)
_DISPLAY = {"bytes": ("MiB", 2**20), "s": ("s", 1.0), "ms": ("ms", 1.0)}


def display_unit(unit: str) -> tuple[str, float]:
    return _DISPLAY.get(unit, (unit, 1.0))


def fmt_number(value: float | None, digits: int = 2) -> str:
    """Two decimals, or three significant digits for magnitudes below 1 (no "0.00 s")."""
    if value is None or math.isnan(value):
        return "\u2014"
    if abs(value) >= 1e15:  # a value past any measure: its magnitude, not 300 digits
        return f"{value:.3g}".replace("-", MINUS)
    if value != 0 and abs(value) < 1:
        digits = max(digits, 2 - math.floor(math.log10(abs(value))))
    text = f"{value:.{digits}f}"
    return text.replace("-", MINUS)


def fmt_ratio(value: float) -> str:
    """Three decimals, or three significant digits where they would show 0.000 or be long."""
    return f"{value:.3f}" if 1e-3 <= value < 1e4 else f"{value:.3g}"


def fmt_pct(value: float | None, signed: bool = True) -> str:
    """A percent change ("+1.20%"), or a dash."""
    if value is None:
        return "\u2014"
    return f"{'+' if signed and value > 0 else ''}{fmt_number(value)}%"


def fmt_value(values: Sequence[float | None], unit: str) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "\u2014"
    shown, div = display_unit(unit)
    return f"{fmt_number(sum(present) / len(present) / div)} {shown}"


def fmt_effect(s: PairedSummary | None, unit: str) -> str:
    if s is None:
        return "\u2014"
    shown, div = display_unit(unit)
    diff = s.mean_diff / div
    sign = "+" if diff > 0 else ""
    parts = [f"{sign}{fmt_number(diff)} {shown}"]
    if s.percent is not None:
        parts[0] += f" ({'+' if s.percent > 0 else ''}{fmt_number(s.percent)}%)"
    if s.ci_low is not None and s.ci_high is not None:
        parts.append(
            f"{s.ci_level:.0%} CI {fmt_number(s.ci_low / div)} to {fmt_number(s.ci_high / div)}"
        )
    parts.append(f"p={s.sign_flip_p:.4g}")
    if s.wins is not None:
        parts.append(f"{s.wins}/{s.n} better")
    if s.geomean_ratio is not None:
        ratio = f"ratio {fmt_ratio(s.geomean_ratio)}"
        if s.ratio_ci_low is not None and s.ratio_ci_high is not None:
            ratio += f" (CI {fmt_ratio(s.ratio_ci_low)} to {fmt_ratio(s.ratio_ci_high)})"
        parts.append(ratio)
    if s.mde_pct is not None:
        parts.append(f"MDE \u00b1{fmt_number(s.mde_pct)}%")
    return " · ".join(parts)


def fmt_judgement(j: Judgement | None) -> str:
    return f" · **FLAGGED: {j.direction}**" if j is not None and j.flagged else ""


def table_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def markdown(
    analysis: Analysis,
    title: str,
    context: Mapping[str, str],
    arm_labels: Mapping[str, str] | None = None,
) -> str:
    """The table plus what it rests on: model (synthetic or not), design, verdicts."""
    labels = dict(arm_labels or {})
    plan = analysis.plan
    control = analysis.control
    lines = [f"### {title}", ""]
    for key, value in context.items():
        lines.append(f"- {key}: {value}")
    headline = _headline(analysis)
    if headline is not None:
        lines.append(f"- default endpoint: {headline.label} ({analysis.headline_rule})")
    design = plan.describe()
    n_blocks = len(plan.blocks)
    orders = ", ".join("/".join(b) for b in design["blocks"])
    lines.append(
        f"- design: {n_blocks} paired block(s), {design['kind']} order "
        f"({orders}); "
        f"position balanced: {'yes' if design['position_balanced'] else 'no'}, "
        f"carry-over balanced: {'yes' if design['carryover_balanced'] else 'no'}; "
        f"warm-up {plan.warmup_per_arm} trial(s) per arm, discarded; one fresh process per "
        "trial, the arms of a block back to back"
    )
    lines.append(
        "- effect = treatment − control per block; CI = paired-t; p = exact two-sided "
        "sign-flip; ratio = geometric mean of per-pair ratios with its paired-t CI on logs; "
        f"MDE = the smallest change the paired t-test on the logs detects with "
        f"{MDE_POWER:.0%} power at 95% with these pairs (noncentral t); {FLAG_RULE}"
    )
    lines.append("")
    header = ["Endpoint"] + [labels.get(a, a) for a in plan.arms]
    header += [f"Paired effect ({t} − {control})" for t in analysis.treatments]
    lines.append(table_row(header))
    lines.append(table_row(["---"] * len(header)))
    for ep in analysis.endpoints:
        missing = analysis.unavailable.get(ep.key, {})
        cells = [ep.label] + [
            "unavailable" if a in missing else fmt_value(analysis.values[ep.key][a], ep.unit)
            for a in plan.arms
        ]
        cells += [
            fmt_effect(analysis.comparisons[ep.key][t], ep.unit)
            + fmt_judgement(analysis.judgements.get(ep.key, {}).get(t))
            for t in analysis.treatments
        ]
        lines.append(table_row(cells))
    for tally in analysis.tallies:
        cells = [tally.label] + [tally.per_arm.get(a, "\u2014") for a in plan.arms]
        cells += [tally.effect] * len(analysis.treatments)
        lines.append(table_row(cells))
    lines.append("")
    lines += _verdict_lines(analysis, headline)
    lines += power_lines(analysis)
    return "\n".join(lines) + "\n"


def _verdict_lines(analysis: Analysis, headline: Endpoint | None) -> list[str]:
    """What the test supports, per endpoint and comparison; the default endpoint first."""
    lines = ["Verdicts (what the test supports):"]
    ordered = [headline] if headline is not None else []
    for ep in ordered + [ep for ep in analysis.endpoints if ep is not headline]:
        for t in analysis.treatments:
            s = analysis.comparisons[ep.key][t]
            if s is not None:
                lead = "**default endpoint** " if ep is headline else ""
                lines.append(f"- {lead}{ep.label}, {t} vs {analysis.control}: {s.verdict()}")
    return lines


def _headline(analysis: Analysis) -> Endpoint | None:
    return next((ep for ep in analysis.endpoints if ep.key == analysis.headline), None)


def power_lines(analysis: Analysis) -> list[str]:
    """Per endpoint: how its trial value is made, its noise, its MDE, its floor; then the
    endpoints an arm could not measure, with the reason."""
    lines = ["", "Measurement power (per endpoint; noise = SD of the paired log-ratios):"]
    for ep in analysis.endpoints:
        for t in analysis.treatments:
            s = analysis.comparisons[ep.key][t]
            j = analysis.judgements.get(ep.key, {}).get(t)
            if s is None or j is None:
                continue
            noise = "\u2014" if s.log_sd is None else f"{s.log_sd:.4f}"
            mde = "\u2014" if s.mde_pct is None else f"\u00b1{fmt_number(s.mde_pct)}%"
            floor = "\u2014" if j.floor_pct is None else f"{fmt_number(j.floor_pct)}%"
            how = f"{ep.statistic}; " if ep.statistic else ""
            lines.append(
                f"- {ep.label}, {t} vs {analysis.control}: {how}noise {noise}, MDE {mde} at "
                f"{s.n} pairs, noise floor {floor} ({j.floor_source})"
                + (f", FLAGGED {j.direction}" if j.flagged else f", not flagged ({j.status})")
            )
    missing = [(ep, analysis.unavailable[ep.key]) for ep in analysis.endpoints
               if ep.key in analysis.unavailable]  # fmt: skip
    if missing:
        lines += ["", "Unavailable (never reported as 0):"]
        for ep, per_arm in missing:
            reasons: dict[str, list[str]] = {}
            for arm, reason in per_arm.items():
                reasons.setdefault(reason, []).append(arm)
            text = "; ".join(f"{', '.join(arms)}: {r}" for r, arms in reasons.items())
            lines.append(f"- {ep.label}: {text}")
    return lines


def to_json(
    analysis: Analysis,
    title: str,
    context: Mapping[str, object],
    arms: Sequence[Arm],
    records: Sequence[TrialRecord],
) -> dict:
    plan_arms = analysis.plan.arms
    return {
        "title": title,
        "context": dict(context),
        "design": analysis.plan.describe(),
        "arms": [a.describe() for a in arms],
        "control": analysis.control,
        "default_endpoint": (
            None
            if analysis.headline is None
            else {"key": analysis.headline, "rule": analysis.headline_rule}
        ),
        "endpoints": [
            {
                **ep.describe(),
                "values": analysis.values[ep.key],
                "available": {a: a not in analysis.unavailable.get(ep.key, {}) for a in plan_arms},
                "unavailable": analysis.unavailable.get(ep.key, {}),
                "comparisons": {
                    t: (None if s is None else s.to_dict())
                    for t, s in analysis.comparisons[ep.key].items()
                },
                "judgements": {
                    t: (None if j is None else j.to_dict())
                    for t, j in analysis.judgements.get(ep.key, {}).items()
                },
            }
            for ep in analysis.endpoints
        ],
        "flag_rule": FLAG_RULE,
        "aa_arms": list(analysis.aa_arms),
        "tallies": [
            {"label": t.label, "per_arm": t.per_arm, "effect": t.effect} for t in analysis.tallies
        ],
        "trials": [r.to_dict() for r in records],
    }


def write_reports(
    out_dir: Path,
    stem: str,
    analysis: Analysis,
    title: str,
    context: Mapping[str, str],
    arms: Sequence[Arm],
    records: Sequence[TrialRecord],
    arm_labels: Mapping[str, str] | None = None,
    sections: Sequence[str] = (),
    extra: Mapping[str, object] | None = None,
) -> tuple[Path, Path]:
    """The markdown (the table, then ``sections``) and the JSON (plus the ``extra`` keys)."""
    md_path = out_dir / f"{stem}.md"
    json_path = out_dir / f"{stem}.json"
    text = "\n".join([markdown(analysis, title, context, arm_labels), *sections])
    write_bytes_atomic(md_path, text.encode())
    data = stamped({**to_json(analysis, title, context, arms, records), **dict(extra or {})})
    write_bytes_atomic(json_path, json.dumps(data, indent=2, allow_nan=False).encode())
    return md_path, json_path
