"""Results directories for the compare page's tests, and the page's verdicts recomputed from an
`ab` report's JSON with scipy (independently of the page's code)."""

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
        'case "$*" in *compile_trial.py*)\n'
        f"  n=$(cat {count} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {count}\n"
        f'  if [ "$n" -gt {succeed} ]; then echo "injected trial failure" >&2; exit 3; fi;;\n'
        "esac\n"
        f'exec {sys.executable} "$@"\n'
    )
    path.chmod(0o755)
    return path


# --- the rule, from the JSON ----------------------------------------------------------------


def mde(sd: float, n: int) -> float:
    """Minimal detectable effect at n pairs, 95% two-sided level, 80% power."""
    return (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)


def excludes_zero(c: dict) -> bool:
    return c["ci_low"] is not None and (c["ci_low"] > 0 or c["ci_high"] < 0)


def flagged_endpoints(data: dict, treatment: str, noise_arm: str | None) -> list[str]:
    """Endpoint keys whose interval excludes 0 and whose mean reaches the floor (the A/A arm's
    spread, or the comparison's own)."""
    out = []
    for e in data["endpoints"]:
        c = e["comparisons"][treatment]
        if c is None or c["n"] < 2 or not excludes_zero(c):
            continue
        basis = e["comparisons"][noise_arm] if noise_arm else c
        if abs(c["mean_diff"]) >= mde(float(np.std(basis["diffs"], ddof=1)), c["n"]):
            out.append(e["key"])
    return out


def flagged_passes(data: dict, treatment: str, noise_arm: str | None) -> list[tuple[str, str]]:
    """(manager, pass) of the passes flagged by the rule: as for endpoints, with each pass's
    spread held at least at the median relative spread of all passes."""
    ranked = {
        (r["manager"], r["pass"]): r for r in data["passes"]["comparisons"][treatment]["ranked"]
    }
    noise = (
        {(r["manager"], r["pass"]): r for r in data["passes"]["comparisons"][noise_arm]["ranked"]}
        if noise_arm
        else ranked
    )
    relative = [
        np.std(r["comparison"]["diffs"], ddof=1) / abs(r["comparison"]["control_mean"])
        for r in noise.values()
        if r["comparison"]["n"] >= 2 and r["comparison"]["control_mean"] != 0
    ]
    typical = float(np.median(relative)) if relative else 0.0
    out = []
    for key, r in ranked.items():
        c = r["comparison"]
        if c["n"] < 2 or not excludes_zero(c):
            continue
        basis = noise.get(key, r)["comparison"]
        sd = max(float(np.std(basis["diffs"], ddof=1)), typical * abs(c["control_mean"]))
        if abs(c["mean_diff"]) >= mde(sd, c["n"]):
            out.append(key)
    return out


def direction(mean_diff: float) -> str:
    return "regression" if mean_diff > 0 else "improvement"  # every compile endpoint: lower


# --- a synthetic compile A/B with passes designed to land on each side of the rule ----------

PAIRS = 6
STEADY = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0]  # ~1.5% relative spread


def _self_ms(pass_name: str, arm: str, block: int) -> float:
    base = 10.0 * STEADY[block]
    if arm == "A":
        return base
    wobble = [0.01, -0.01, 0.02, -0.02, 0.0, 0.005][block]
    return {
        "moved": base * 1.3 + wobble,  # +30%, far above the floor
        "faster": base * 0.7 + wobble,  # -30%
        "tiny": base + 0.05 + wobble / 10,  # +0.5%: interval excludes 0, below the floor
        "noisy": base + [1.0, -1.2, 0.8, -0.9, 1.1, -0.7][block],  # interval includes 0
    }.get(pass_name, base * (1 + wobble))


SYNTHETIC_PASSES = ("moved", "faster", "tiny", "noisy", *(f"steady{i}" for i in range(8)))


def synthetic_experiment(out: Path) -> Path:
    """experiment.json + trials.jsonl of a two-arm compile A/B with --pass-profile, whose
    passes are made up (the `ab report` then analyses them as any run's)."""
    plan = make_plan(["A", "B"], PAIRS, 0)
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
            TrialRecord(slot.index, slot.block, slot.position, arm, False, 0, total, 0.0,
                        str(out / f"trial-{slot.index:03d}.json"), result)
        )  # fmt: skip
    arms = [{"name": a, "command": ["python", "trial.py", a, "{out}"]} for a in plan.arms]
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
