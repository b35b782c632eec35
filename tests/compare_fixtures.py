"""Results directories for the compare page's tests, and the flags recomputed from an `ab`
report's JSON per-pair values with scipy (independently of the trials' analysis code)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from compile_ahead.profiling.trials.design import make_plan
from compile_ahead.profiling.trials.experiment import save_experiment
from compile_ahead.profiling.trials.runner import TrialRecord


def failing_interpreter(path: Path, succeed: int) -> Path:
    """An arm's interpreter: the real one for the arm probes and the first ``succeed`` trials,
    then every trial fails (exit 3)."""
    count = path.with_suffix(".count")
    path.write_text(
        "#!/bin/sh\n"
        'case "$*" in *compile_kind/trial.py*)\n'
        f"  n=$(cat {count} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {count}\n"
        f'  if [ "$n" -gt {succeed} ]; then echo "injected trial failure" >&2; exit 3; fi;;\n'
        "esac\n"
        f'exec {sys.executable} "$@"\n'
    )
    path.chmod(0o755)
    return path


# --- the rule, from the JSON's per-pair values ------------------------------------------------
# Recomputed here with scipy (t quantiles, ttest_1samp) and a Holm step-down written out:
# flagged = the log-ratio's 95% interval excludes 0, its paired-t p stays <= 0.05 after Holm's
# correction over the table's comparisons, and |mean log-ratio| exceeds the noise floor (the
# half-width of the A/A arm's interval for the same row, else the row's own).


def _logs(values: dict, control: str, arm: str) -> np.ndarray | None:
    """log(arm / control) over complete pairs; None when a value is not positive."""
    pairs = [(a, b) for a, b in zip(values[control], values[arm], strict=True)
             if a is not None and b is not None]  # fmt: skip
    if not pairs or any(a <= 0 or b <= 0 for a, b in pairs):
        return None
    return np.log([b / a for a, b in pairs])


def _half_width(logs: np.ndarray | None) -> float | None:
    if logs is None or logs.size < 2:
        return None
    return float(stats.t.ppf(0.975, logs.size - 1) * np.std(logs, ddof=1) / math.sqrt(logs.size))


def _p(logs: np.ndarray) -> float:
    if np.std(logs, ddof=1) == 0:  # a constant ratio: certain, or no change at all
        return 1.0 if logs.mean() == 0 else 0.0
    return float(stats.ttest_1samp(logs, 0.0).pvalue)


def holm_step_down(pvalues: dict) -> dict:
    """Holm's adjusted p-values: the i-th smallest times (m - i), made monotone, capped at 1."""
    out, running = {}, 0.0
    ordered = sorted(pvalues.items(), key=lambda kv: kv[1])
    for i, (key, p) in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - i) * p))
        out[key] = running
    return out


def flagged_rows(rows: dict, control: str, treatment: str, noise_arm: str | None) -> dict:
    """rows: key -> per-arm values. key -> "regression"/"improvement" for the flagged ones."""
    logs = {k: _logs(v, control, treatment) for k, v in rows.items()}
    tested = {k: x for k, x in logs.items() if x is not None and x.size >= 2}
    adjusted = holm_step_down({k: _p(x) for k, x in tested.items()})
    out = {}
    for key, x in tested.items():
        half = _half_width(x)
        floor = _half_width(_logs(rows[key], control, noise_arm)) if noise_arm else None
        floor = half if floor is None else floor
        if abs(x.mean()) > half and adjusted[key] <= 0.05 and abs(x.mean()) > floor:
            out[key] = "regression" if x.mean() > 0 else "improvement"  # every one: lower
    return out


def flagged_endpoints(data: dict, treatment: str, noise_arm: str | None) -> dict[str, str]:
    rows = {e["key"]: e["values"] for e in data["endpoints"]
            if e["comparisons"].get(treatment) is not None}  # fmt: skip
    return flagged_rows(rows, data["control"], treatment, noise_arm)


def flagged_passes(data: dict, treatment: str, noise_arm: str | None) -> dict[tuple, str]:
    """(manager, pass) -> direction, over the passes in both arms of the comparison."""
    ranked = data["passes"]["comparisons"][treatment]["ranked"]
    rows = {(r["manager"], r["pass"]): r["values"] for r in ranked}
    return flagged_rows(rows, data["control"], treatment, noise_arm)


# --- a synthetic compile A/B with passes designed to land on each side of the rule ----------

PAIRS = 6
STEADY = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0]  # the block's load, the same for every arm
AA_NOISE = [0.02, -0.02, 0.015, -0.015, 0.01, -0.01]  # A-aa: ~1.7% spread, no mean change
SYNTHETIC_ARMS = ("A", "A-aa", "B")


def _self_ms(pass_name: str, arm: str, block: int) -> float:
    base = 10.0 * STEADY[block]
    if arm == "A":
        return base
    if arm == "A-aa":
        return base * (1 + AA_NOISE[block])
    wobble = [0.01, -0.01, 0.02, -0.02, 0.0, 0.005][block]
    return {
        "moved": base * 1.3 + wobble,  # +30%, far above the floor
        "faster": base * 0.7 + wobble,  # -30%
        "tiny": base + 0.05 + wobble / 10,  # +0.5%: significant, below the A/A arm's floor
        "noisy": base + [1.0, -1.2, 0.8, -0.9, 1.1, -0.7][block],  # interval includes 0
    }.get(pass_name, base * (1 + wobble))


SYNTHETIC_PASSES = ("moved", "faster", "tiny", "noisy", *(f"steady{i}" for i in range(8)))


def synthetic_experiment(out: Path, aa: bool = True, started: float = 0.0) -> Path:
    """experiment.json + trials.jsonl of a compile A/B with --pass-profile (A, B and with
    ``aa`` an A/A arm A-aa marked as `ab compile --aa` marks it), whose passes are made up (the
    `ab report` then analyses them as any run's). The results have the shape of trials
    written before per-compile records (the analysis reads such older directories too).
    ``started``: the first trial's start time (runs to pool apart need different ones)."""
    plan = make_plan([a for a in SYNTHETIC_ARMS if aa or a != "A-aa"], PAIRS, 0)
    records = []
    for slot in plan.slots:
        arm = plan.arms[slot.arm]
        self_s = {"M": {p: _self_ms(p, arm, slot.block) / 1e3 for p in SYNTHETIC_PASSES}}
        total = sum(self_s["M"].values()) * 2
        result = {
            "rungs": [{"capacity": 16, "compile_s": total}], "total_compile_s": total,
            "total_read_s": 0.01, "total_transformations_s": total / 2, "pass_self_s": self_s,
            "pass_runs": {"M": {p: 1 + (arm == "B" and p == "moved") for p in SYNTHETIC_PASSES}},
            "max_rss_bytes": 100 << 20, "trial_wall_s": total + 0.3,
            "openvino_version": "synthetic",
        }  # fmt: skip
        records.append(
            TrialRecord(slot.index, slot.block, slot.position, arm, False, 0, total,
                        started + slot.index, str(out / f"trial-{slot.index:03d}.json"), result)
        )  # fmt: skip
    arms = [{"name": a, "command": ["python", "trial.py", a, "{out}"]} for a in plan.arms]
    for arm in arms:
        if arm["name"] == "A-aa":
            arm["aa_of"] = "A"
    exp = {
        "kind": "compile", "arms": arms, "pairs": PAIRS, "warmup": 0, "ladder": [16],
        "pass_profile": True, "counters": False, "context": {"model": "synthetic"},
        "labels": {},
    }  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    save_experiment(out, exp, records)
    return out


def load_json(path: Path) -> dict:
    return json.loads(path.read_text())
