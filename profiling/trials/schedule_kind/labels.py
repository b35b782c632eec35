"""What an `ab schedule` report calls the model, the devices and the arms, from the trial
reports themselves."""

from __future__ import annotations

from collections.abc import Sequence

from compile_ahead.profiling.trials.runner import TrialRecord


def model_label(records: Sequence[TrialRecord]) -> str:
    """What the trials ran, synthetic or not, from the reports themselves."""
    for r in records:
        res = r.result or {}
        if "model" in res:
            synthetic = res.get("synthetic")
            kind = "weights ?"
            if isinstance(synthetic, bool):
                kind = "SYNTHETIC weights" if synthetic else "real weights"
            return f"{res['model']} [{kind}]"
    return "unknown (no trial report)"


def devices(records: Sequence[TrialRecord]) -> str:
    """Device per arm as the trial reports name it."""
    seen: dict[str, str] = {}
    for r in records:
        if r.result is not None and r.arm not in seen:
            seen[r.arm] = str(r.result.get("device", "?"))
    return "; ".join(f"{arm}: {dev}" for arm, dev in seen.items()) or "unknown"


def arm_labels(records: Sequence[TrialRecord]) -> dict[str, str]:
    """Column heads: the arm plus the short name of its schedule (as its report gives it)."""
    labels: dict[str, str] = {}
    for r in records:
        title = (r.result or {}).get("schedule_title")
        if r.arm not in labels and isinstance(title, str) and title:
            labels[r.arm] = f"{r.arm} {title.split(':')[0].split(',')[0]}"
    return labels
