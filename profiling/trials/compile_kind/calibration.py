"""`ab calibrate`: the control against itself plus a known amount of CPU work.

Calibration trials of the control (fresh processes, not part of the experiment) measure its
compile CPU time per rung; the calibration arm is then the control whose every compile also
burns delta% of that median on the compiling thread, inside the measured window
(meter.spin). Only this module sets that spin, and every output of such an
experiment says CALIBRATION. From the experiment (and its A/A arm with --aa) the report
states per endpoint: the noise of the paired differences, whether the A/A comparison was
detected or flagged, the effect the spin made and whether it was detected, and the MDE.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.atomic import writing
from compile_ahead.profiling.trials.analysis import Analysis
from compile_ahead.profiling.trials.compile_kind.arms import ArmExtras
from compile_ahead.profiling.trials.compile_kind.trial_values import rung_value
from compile_ahead.profiling.trials.design import TrialSlot
from compile_ahead.profiling.trials.report import fmt_number, fmt_pct, table_row
from compile_ahead.profiling.trials.runner import TRIALS_LOG, Arm, TrialRecord, run_one

DELTA_SUFFIX = "-delta"
TRIALS_DIR = "calibration-trials"


def parse_delta(text: str) -> float:
    """``--delta`` in percent: "1%", "0.5%" or "1" (percent either way)."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise CompileAheadError(f"--delta {text!r}: expected a percent, e.g. 1% or 0.5%") from None
    if not 0 < value <= 100:
        raise CompileAheadError(f"--delta {text}: must be above 0% and at most 100%")
    return value


def measure_control(
    arm: Arm, trials: int, out: Path, timeout_s: float | None, statistic: str
) -> dict[int, float]:
    """Run ``trials`` fresh trials of the control; capacity -> median compile CPU seconds."""
    directory = out / TRIALS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    records: list[TrialRecord] = []
    for i in range(trials):
        record = run_one(arm, TrialSlot(i, -1, 0, 0, True), directory, timeout_s)
        records.append(record)
        with writing(directory / TRIALS_LOG):
            (directory / TRIALS_LOG).write_text(
                "".join(json.dumps(r.to_dict(), allow_nan=False) + "\n" for r in records)
            )
        if record.error is not None:
            raise CompileAheadError(f"calibration trial {i} of {arm.name} failed: {record.error}")
    per_rung: dict[int, list[float]] = {}
    for record in records:
        for rung in (record.result or {}).get("rungs", []):
            value = rung_value(rung, ("cpu_s",), statistic)
            if value is None:
                raise CompileAheadError(f"calibration trial of {arm.name}: no compile CPU time")
            per_rung.setdefault(int(rung["capacity"]), []).append(value)
    return {c: statistics.median(v) for c, v in per_rung.items()}


def delta_arm(control: str, delta_pct: float, cpu_s: Mapping[int, float]) -> ArmExtras:
    spin = {str(c): s * delta_pct / 100.0 for c, s in cpu_s.items()}
    return ArmExtras(
        manifest={"calibration_spin_s": spin},
        info={"calibration": {"delta_pct": delta_pct, "spin_s": spin, "of": control}},
        label=f" (CALIBRATION: the control + a spin of {delta_pct:g}% of its compile CPU time)",
    )


def describe(
    control: str, arm: str, delta_pct: float, cpu_s: Mapping[int, float], trials: int
) -> tuple[dict, str]:
    """(experiment.json's "calibration", the report's context line)."""
    spin = {str(c): s * delta_pct / 100.0 for c, s in cpu_s.items()}
    exp = {"delta_pct": delta_pct, "control": control, "arm": arm, "spin_s": spin,
           "control_cpu_s": {str(c): s for c, s in cpu_s.items()}, "trials": trials}  # fmt: skip
    line = (
        f"arm {arm} is the control {control} plus a CPU spin on the compiling thread of "
        f"{delta_pct:g}% of the control's median compile CPU time ({trials} calibration "
        f"trials): spin per compile {', '.join(f'C={c} {s * 1e3:.3g} ms' for c, s in spin.items())}"
        "; not a real change"
    )
    return exp, line


def _expected_spin_s(key: str, spin: Mapping[str, float]) -> float | None:
    """Seconds the spin adds to an endpoint's trial value (wall: at least this much)."""
    if key in ("cpu_total", "compile_total"):
        return sum(spin.values())
    if key.startswith("compile_") and key.removeprefix("compile_") in spin:
        return spin[key.removeprefix("compile_")]
    return None


def summary(analysis: Analysis, calibration: Mapping) -> list[dict]:
    """Per endpoint: noise, MDE, the A/A comparison's outcome, the spin's effect."""
    arm = calibration["arm"]
    rows = []
    for ep in analysis.endpoints:
        s = analysis.comparisons[ep.key].get(arm)
        if s is None:
            continue
        j = analysis.judgements[ep.key][arm]
        aa = [(a, analysis.comparisons[ep.key].get(a)) for a in analysis.aa_arms]
        spin = _expected_spin_s(ep.key, calibration["spin_s"])
        row = {
            "key": ep.key, "label": ep.label, "statistic": ep.statistic, "n": s.n,
            "noise_log_sd": s.log_sd, "mde_pct": s.mde_pct,
            "delta": {
                "expected_pct": None if spin is None else spin / s.control_mean * 100.0,
                "effect_pct": s.effect_pct,
                "ratio_ci": [s.ratio_ci_low, s.ratio_ci_high],
                "detected": j.detected if j else False, "flagged": j.flagged if j else False,
            },
            "aa": [
                {"arm": a, "noise_log_sd": c.log_sd, "effect_pct": c.effect_pct,
                 "detected": analysis.judgements[ep.key][a].detected,  # type: ignore[union-attr]
                 "flagged": analysis.judgements[ep.key][a].flagged}  # type: ignore[union-attr]
                for a, c in aa if c is not None
            ],
        }  # fmt: skip
        rows.append(row)
    return rows


def markdown(rows: list[dict], calibration: Mapping) -> str:
    delta = calibration["delta_pct"]
    lines = [
        f"### CALIBRATION: A/A and A/A+{delta:g}% (arm {calibration['arm']})",
        "",
        "- expected: the spin's seconds over the control's value (CPU time: the effect the "
        "spin makes; wall: at least this much); detected: the log-ratio's 95% CI excludes 0",
        "",
    ]
    header = ["Endpoint", "Pairs", "Noise (SD log-ratio)", "MDE", "A/A effect",
              f"+{delta:g}%: expected", f"+{delta:g}%: effect (95% CI)", "Detected"]  # fmt: skip
    lines += [table_row(header), table_row(["---"] * len(header))]
    for row in rows:
        d = row["delta"]
        low, high = d["ratio_ci"]
        ci = "" if low is None else f" ({fmt_pct((low - 1) * 100)} to {fmt_pct((high - 1) * 100)})"
        aa = "; ".join(
            f"{fmt_pct(a['effect_pct'])}" + (" FLAGGED" if a["flagged"] else "")
            + (" (CI excludes 0)" if a["detected"] and not a["flagged"] else "")
            for a in row["aa"]
        ) or "no A/A arm (--aa)"  # fmt: skip
        noise = "\u2014" if row["noise_log_sd"] is None else f"{row['noise_log_sd']:.4f}"
        mde = "\u2014" if row["mde_pct"] is None else f"\u00b1{fmt_number(row['mde_pct'])}%"
        cells = [row["label"], str(row["n"]), noise, mde, aa, fmt_pct(d["expected_pct"]),
                 fmt_pct(d["effect_pct"]) + ci, "yes" if d["detected"] else "no"]  # fmt: skip
        lines.append(table_row(cells))
    return "\n".join(lines) + "\n"
