"""What a batch adds to the run report: each sequence's prompt, tokens, stop and first token,
the batch's aggregate rate and step time, and KV bytes per sequence beside the batch's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compile_ahead.runtime.ladder.reporting.report import RunReport

MIB = 2**20
SHOWN_SEQUENCES = 8  # the summary's per-sequence lines; beyond, one line folds the rest


def batch_fields(
    report: RunReport,
    sequences: list[dict[str, Any]],
    step_ns: list[int],
    from_prefill: int = 0,
) -> dict[str, Any]:
    """The report's batch fields. A step feeds every live sequence one token (a prompt token
    or its last one); every generated token is a step's output but the ``from_prefill`` first
    tokens a prefill graph gave, which the aggregate rate over the step time leaves out."""
    batch = len(sequences)
    generated = sum(s["tokens_generated"] for s in sequences)
    stepped = generated - from_prefill
    steps_s = sum(step_ns) / 1e9
    per_sequence = {
        f"{name}_per_sequence": (value / batch if value is not None else None)
        for name, value in (
            ("kv_reserved_avg_bytes", report.kv_reserved_avg_bytes),
            ("kv_reserved_peak_bytes", report.kv_reserved_peak_bytes),
            ("kv_committed_avg_bytes", report.kv_committed_avg_bytes),
            ("kv_committed_peak_bytes", report.kv_committed_peak_bytes),
        )
    }
    return {
        "batch": batch,
        "sequences": sequences,
        "batch_steps": len(step_ns),
        "step_s_mean": steps_s / len(step_ns) if step_ns else None,
        "step_s_median": sorted(step_ns)[len(step_ns) // 2] / 1e9 if step_ns else None,
        "tokens_generated": generated,
        "tokens_per_s": stepped / steps_s if steps_s > 0 else None,
        **per_sequence,
    }


def batch_lines(extra: dict[str, Any]) -> list[str]:
    """The summary's batch part (nothing for a batch-1 run)."""
    sequences = extra.get("sequences")
    if not sequences:
        return []
    rate, step = extra.get("tokens_per_s"), extra.get("step_s_mean")
    lines = [
        f"batch {extra['batch']}: {extra['tokens_generated']} tokens in "
        f"{extra['batch_steps']} steps"
        + (f", {rate:.2f} tok/s aggregate" if rate else "")
        + (f", {step * 1e3:.2f} ms per step" if step else "")
        + "; KV per sequence: reserved avg "
        + _mib(extra.get("kv_reserved_avg_bytes_per_sequence"))
        + " MiB, committed peak "
        + _mib(extra.get("kv_committed_peak_bytes_per_sequence"))
        + " MiB"
    ]
    shown = sequences if len(sequences) <= SHOWN_SEQUENCES else sequences[: SHOWN_SEQUENCES - 1]
    for s in shown:
        first = s["first_token_s"]
        when = f"first token {first:.2f} s" if first is not None else "no token"
        lines.append(
            f"  sequence {s['sequence']}: prompt {s['prompt_len']}, "
            f"{s['tokens_generated']} tokens, {when}, stop: {s['stop_reason']}"
        )
    if len(shown) < len(sequences):
        lines.append(f"  ... {len(sequences) - len(shown)} more sequences (each in the report)")
    return lines


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MIB:.2f}"
