"""A profile-compile session's trace: the device track (the model named on it), the process
RSS counter (sampled on a thread), the graphs-resident counter and decode steps in slices;
written into the staging directory and validated once closed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compile_ahead.profiling.results_format.profile import TRACE_NAME

if TYPE_CHECKING:  # openvino must not load before the collector is armed
    from compile_ahead.profiling.perfetto.validate import TraceReport


class ProfileTrace:
    def __init__(
        self, staging: Path, device: str, label: str, model: dict, ov_config: dict,
        steps_per_slice: int,
    ):  # fmt: skip
        from compile_ahead.profiling.perfetto.writer import (
            GRAPHS_RESIDENT,
            PROCESS_RSS_BYTES,
            TOKENS_PER_S,
            TraceWriter,
        )
        from compile_ahead.profiling.session.rss import RssSampler
        from compile_ahead.profiling.traces.decode_steps import StepSlicer

        self.staging = staging
        self.writer = w = TraceWriter(staging / TRACE_NAME, process_name="profile-compile")
        self.device_track = w.device_track(device)
        w.instant(self.device_track, f"model: {label}", None,
                  {**model, "ov_config": json.dumps(ov_config)})  # fmt: skip
        self.rss_track = w.counter_track(PROCESS_RSS_BYTES)
        self.graphs_track = w.counter_track(GRAPHS_RESIDENT)
        self.slicer = StepSlicer(
            w, self.device_track, steps_per_slice, w.counter_track(TOKENS_PER_S)
        )
        self.sampler = RssSampler(0.05, on_sample=lambda ts, v: w.counter(self.rss_track, ts, v))
        self.sampler.start()
        w.counter(self.graphs_track, None, 0)

    def graphs_resident(self, count: int) -> None:
        self.writer.counter(self.graphs_track, None, count)

    def validated(self, target: Path) -> tuple[TraceReport, dict[str, Any]]:
        """The closed trace validated, as it is named where it is published, and what the
        report says of it."""
        from compile_ahead.profiling.perfetto.validate import validate_trace

        validation = dataclasses.replace(
            validate_trace(self.staging / TRACE_NAME), path=str(target / TRACE_NAME)
        )
        described = {
            "path": str(target / TRACE_NAME),
            "valid": validation.ok,
            "errors": validation.errors,
            "slices": validation.slices,
            "counter_values": validation.counter_values,
            "flows": validation.flows,
            "tracks": validation.tracks,
        }
        return validation, described
