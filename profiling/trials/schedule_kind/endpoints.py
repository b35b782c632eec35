"""What `ab schedule` tests, from each trial's run report: foreground compile wall, protocol
critical path, decode inference, boundary waits, migration, time-weighted KV (reserved and
committed, never mixed), peak RSS, decode tok/s per rung."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from compile_ahead.profiling.trials.analysis import (
    Endpoint,
    result_field,
)
from compile_ahead.runtime.ladder.reporting.report import BoundaryRecord


def boundary_records(result: dict) -> list[BoundaryRecord] | None:
    """A report's boundaries as typed records; None when it has none or a malformed one."""
    bounds = result.get("boundaries")
    if not isinstance(bounds, list):
        return None
    try:
        return [BoundaryRecord.from_json(b) for b in bounds]
    except (KeyError, TypeError):
        return None


def _boundary_sum(key: str) -> Callable[[dict], float | None]:
    def get(result: dict) -> float | None:
        records = boundary_records(result)
        values = [getattr(b, key) for b in records or []]
        numbers = [float(v) for v in values if isinstance(v, int | float)]
        # no boundary records (one rung, or an upstream pipeline that switches internally):
        # nothing was measured, which is not the same as zero
        return sum(numbers) if numbers and len(numbers) == len(values) else None

    return get


def _rung_tok_s(capacity: int) -> Callable[[dict], float | None]:
    def get(result: dict) -> float | None:
        for rung in result.get("rungs") or []:
            if isinstance(rung, dict) and rung.get("capacity") == capacity:
                value = rung.get("tok_s")
                return float(value) if isinstance(value, int | float) else None
        return None

    return get


def _decode_graphs_foreground(result: dict) -> float | None:
    """Foreground compile without the prefill graph's (which both arms of a schedule A/B
    compile alike): what the schedule itself puts before decoding."""
    total, prefill = result_field("foreground_compile_s")(result), None
    if total is not None:
        prefill = result_field("prefill_compile_s")(result)
    return None if total is None or prefill is None else total - prefill


def schedule_endpoints(ladder: Sequence[int], batch: int = 1) -> list[Endpoint]:
    """The endpoints of a schedule experiment; at ``batch`` > 1 also the batch's aggregate
    decode rate and its time per step (the run report's batch fields)."""
    f = result_field
    eps = [
        Endpoint("foreground_compile", "Foreground compile wall", "s", "lower",
                 f("foreground_compile_s")),
        Endpoint("foreground_decode_graphs", "Foreground compile, decode graphs only", "s",
                 "lower", _decode_graphs_foreground),
        Endpoint("first_token", "First token (from the command's start)", "s", "lower",
                 f("first_token_s")),
        Endpoint("critical_path", "Protocol critical path", "s", "lower", f("critical_path_s")),
        Endpoint("decode", "Decode inference", "s", "lower", f("decode_s")),
        Endpoint("boundary_wait", "Boundary wait (sum)", "s", "lower", _boundary_sum("wait_s")),
        Endpoint("migration", "Boundary migration (sum)", "s", "lower",
                 _boundary_sum("migration_s")),
        Endpoint("kv_reserved_avg", "KV reserved, time-weighted avg", "bytes", "lower",
                 f("kv_reserved_avg_bytes")),
        Endpoint("kv_committed_avg", "KV committed, time-weighted avg", "bytes", "lower",
                 f("kv_committed_avg_bytes")),
        Endpoint("kv_reserved_peak", "KV reserved, peak", "bytes", "lower",
                 f("kv_reserved_peak_bytes")),
        Endpoint("peak_rss", "Peak RSS", "bytes", "lower", f("peak_rss_bytes")),
        Endpoint("graphs_resident", "Compiled graphs resident, max", "graphs", "lower",
                 f("graphs_resident_max")),
    ]  # fmt: skip
    eps += [
        Endpoint(f"tok_s_{c}", f"Decode tok/s, rung C={c}", "tok/s", "higher", _rung_tok_s(c))
        for c in ladder
    ]
    if batch > 1:
        eps += [
            Endpoint("batch_tok_s", "Decode tok/s, all sequences (aggregate)", "tok/s",
                     "higher", f("tokens_per_s")),
            Endpoint("step_time", "Decode step time, mean (one token per sequence)", "s",
                     "lower", f("step_s_mean")),
        ]  # fmt: skip
    return eps
