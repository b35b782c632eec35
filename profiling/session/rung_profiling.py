"""Each compile a profile-compile session profiles: under the counters and a progress line, a
job on the trace, a row of the report; a decode graph's steps timed after it when asked."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.npu_patches.depsort import depsort_reading
from compile_ahead.profiling.session import passprofile
from compile_ahead.profiling.session.decode_on_rung import decode_on_rung
from compile_ahead.profiling.session.foreign_model import compile_foreign
from compile_ahead.profiling.session.profile_trace import ProfileTrace

if TYPE_CHECKING:  # openvino must not load before the collector is armed
    from compile_ahead.profiling.session.rung_profile import RungProfile
    from compile_ahead.runtime.compile.graph.result import CompileResult
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.ladder.settings.prefill_plan import PrefillPlan


@dataclass
class RungProfiler:
    """The profiled compiles of one session: their rows (``rungs``, ``decode``: the report's
    lists) and their pass profiles."""

    trace: ProfileTrace
    options: CompileOptions
    pass_file: Path | None  # passes recorded for each profiled compile only
    rungs: list[dict]
    decode: list[dict]
    pass_profiles: list[passprofile.PassProfile] = field(default_factory=list)

    def _keep_passes(self, profile: RungProfile) -> None:
        if profile.passes is not None:
            self.pass_profiles.append(profile.passes)

    def model(self, foreign: Path, shapes: Any) -> None:
        """One compile of a model that is not a stateful decoder (capacity shown as 0)."""
        from compile_ahead import itt_collector
        from compile_ahead.profiling.session.progress_line import ProgressLine
        from compile_ahead.profiling.session.rung_profile import profile_rung
        from compile_ahead.profiling.traces.compile_jobs import begin_job, end_job

        w = self.trace.writer
        job = begin_job(w, 0, time.monotonic_ns(), label=foreign.name)
        try:
            with (
                ProgressLine(f"compiling {foreign.name}"),
                passprofile.recording_passes(self.pass_file),
            ):
                profile, result = profile_rung(
                    lambda: compile_foreign(foreign, shapes, self.options),
                    0,
                    self.pass_file,
                    self.trace.sampler,
                )
        except CompileAheadError as err:
            w.slice_end(job, None, args={"error": str(err)})
            raise
        names = itt_collector.thread_names({e.tid for e in profile.spans})
        end_job(w, job, profile, names)
        self._keep_passes(profile)
        row = {**profile.to_json(), "kind": "as-is", "chunk": None}
        self.rungs.append({**row, "model_file": str(foreign)})
        del result

    def _spec(self, capacity: int, prefill: PrefillPlan | None, batch: int) -> GraphSpec:
        """The graph profiled: a decode graph of ``batch`` sequences, or ``prefill``'s."""
        from compile_ahead.runtime.graphs.spec import GraphSpec

        kv = self.options.kv_precision
        assert kv is not None
        if prefill is None:
            return GraphSpec(capacity, 1, kv, batch=batch)
        return prefill.spec(capacity, kv)

    def rung(
        self,
        compile_rung: Callable[..., CompileResult],
        capacity: int,
        prefill: PrefillPlan | None,
        batch: int,
        decode_tokens: int | None,
    ) -> None:
        """Compile one rung's decode graph for ``batch`` sequences, or its prefill graph as
        ``prefill`` plans it (one sequence), under the counters; ``decode_tokens`` steps are
        then timed on a decode graph."""
        from compile_ahead import itt_collector
        from compile_ahead.profiling.session.progress_line import ProgressLine
        from compile_ahead.profiling.session.rung_profile import profile_rung
        from compile_ahead.profiling.traces.compile_jobs import begin_job, end_job

        w = self.trace.writer
        spec = self._spec(capacity, prefill, batch)
        chunk = spec.chunk
        shape = None if prefill is None else prefill.shape
        job = begin_job(w, capacity, time.monotonic_ns(), chunk=chunk, shape=shape)
        what = f"C={capacity}" if prefill is None else f"prefill C={capacity} L={chunk} {shape}"
        what += f" B={batch}" if batch > 1 else ""
        try:
            with (
                ProgressLine(f"compiling {what} for {self.options.device}"),
                passprofile.recording_passes(self.pass_file),
            ):
                profile, result = profile_rung(
                    lambda: compile_rung(spec), capacity, self.pass_file, self.trace.sampler
                )
        except CompileAheadError as err:
            w.slice_end(job, None, args={"error": str(err)})
            raise
        # Decode steps are timed on decode graphs only.
        tokens = 0 if chunk > 1 else decode_tokens
        flow = w.new_flow()
        names = itt_collector.thread_names({e.tid for e in profile.spans})
        # A patched NPU compiler's counters, when one is loaded (never zeros in its place).
        depsort = depsort_reading()
        extra = {f"depsort_{k}": v for k, v in (depsort.values or {}).items()}
        end_job(w, job, profile, names, flows_out=[flow] if tokens else (), extra_args=extra)
        self.trace.graphs_resident(1)
        self._keep_passes(profile)
        self.rungs.append(
            {
                **profile.to_json(),
                "kind": spec.kind,
                "chunk": chunk,
                "batch": spec.batch,
                "prefill_shape": shape,
                "depsort_counters": depsort.to_json(),
            }
        )
        if tokens:
            decode = decode_on_rung(self.trace, result.step, capacity, tokens, flow, profile.end_ns)
            self.decode.append({"capacity": capacity, "batch": batch, **decode})
        del result  # one rung's compiled weights resident at a time
        self.trace.graphs_resident(0)
