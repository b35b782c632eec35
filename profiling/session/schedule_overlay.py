"""A schedule's run overlaid on a profile-compile session's trace: the teacher-forced protocol
under the schedule, its report kept in the session's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.session.profile_trace import ProfileTrace

if TYPE_CHECKING:  # openvino must not load before the collector is armed
    from compile_ahead.runtime.ladder.settings.config import RunConfig
    from compile_ahead.runtime.sources.base import ModelSource


def overlay_schedule(
    report: dict[str, Any],
    source: ModelSource,
    config: RunConfig,
    trace: ProfileTrace,
    device: str,
    steps_per_slice: int,
) -> None:
    """Run the ladder protocol under the schedule, on the same trace (the RSS sampler already
    draws the process RSS counter); the run's report goes in ``report["run"]``."""
    from compile_ahead.profiling.traces.ladder_run import TraceRunEvents
    from compile_ahead.runtime.ladder.reporting.events import FanOut
    from compile_ahead.runtime.ladder.reporting.progress import ProgressBar
    from compile_ahead.runtime.ladder.runner import run_ladder

    settled = config.for_model(source)
    name, tokens = settled.schedule.name, settled.protocol.decode_tokens
    print(f"running the teacher-forced protocol under {name} ({tokens} tokens) ...")
    events = TraceRunEvents(
        trace.writer, device, steps_per_slice, skip_counters=frozenset({"rss_bytes"})
    )
    bar = ProgressBar(tokens)
    try:
        result = run_ladder(source, settled, FanOut(events, bar))
    finally:
        bar.close()
        events.close()
    print(result.report.summary())
    report["run"] = result.report.to_json()
    if result.error is not None:
        raise CompileAheadError(f"the {name} run stopped: {result.error}")
