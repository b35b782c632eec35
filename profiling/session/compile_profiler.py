"""One profile-compile session: set up, profile each rung, optionally overlay a schedule's run,
then finish by writing the report and publishing the output directory whole.

Everything is written into a staging directory beside ``--out``; finish() swaps it in, so a
reader never sees half a profile and a failed profile never replaces a good one (it is kept
at ``<out>.failed`` instead). What the session is told is in profile_options.py; each profiled
compile in rung_profiling.py; the trace in profile_trace.py; the schedule's run in
schedule_overlay.py; the printed tables in profile_tables.py.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compile_ahead.errors import CompileAheadError, OutputWriteError, write_error
from compile_ahead.output.atomic import write_json_atomic
from compile_ahead.output.checks import destination, mark_output_dir
from compile_ahead.output.dirs import make_staging_dir, publish_dir
from compile_ahead.output.format_version import stamped
from compile_ahead.profiling.npu_patches.depsort import depsort_reading
from compile_ahead.profiling.results_format.profile import (
    PASSES_NAME,
    REPORT_NAME,
    TOOL,
    TRACE_NAME,
)
from compile_ahead.profiling.session import passprofile
from compile_ahead.profiling.session.foreign_model import model_file, parse_shapes
from compile_ahead.profiling.session.profile_options import ProfileOptions, graph_kinds
from compile_ahead.profiling.session.profile_tables import print_tables
from compile_ahead.profiling.session.profile_trace import ProfileTrace
from compile_ahead.profiling.session.rung_profiling import RungProfiler
from compile_ahead.profiling.session.schedule_overlay import overlay_schedule
from compile_ahead.runtime.ladder.settings.capacities import Ladder

if TYPE_CHECKING:  # openvino must not load before the collector is armed
    from collections.abc import Callable

    from compile_ahead.runtime.compile.graph.result import CompileResult
    from compile_ahead.runtime.compile.settings.modes import GraphMode
    from compile_ahead.runtime.ladder.settings.config import RunConfig
    from compile_ahead.runtime.ladder.settings.prefill_plan import PrefillPlan


class CompileProfiler:
    def __init__(self, settings: ProfileOptions, config: RunConfig):
        """``config``: the run configuration profile-compile's flags give (validated; its
        ladder the rungs to profile, its schedule the overlay's); ``settings`` its own."""
        assert isinstance(config.ladder, Ladder) and config.graph is not None
        self.settings = settings
        self.config = config
        self.options = config.options
        self.graph: GraphMode = config.graph
        self.ladder = list(config.ladder.rungs)
        self.out: Path = settings.out
        try:
            self.staging = make_staging_dir(self.out)
        except OSError as err:
            raise write_error(self.out, err) from None
        self.trace: ProfileTrace | None = None  # once setup() opens it
        try:
            mark_output_dir(self.staging)  # published whole: the marker makes it replaceable
        except OutputWriteError as err:
            self.abandon()
            raise write_error_at(err, self.staging, self.out) from None
        # On for each profiled compile only (passprofile.recording_passes).
        self.pass_file = None if not settings.pass_profile else self.staging / PASSES_NAME
        self.report: dict[str, Any] = {}
        self.failure: CompileAheadError | None = None

    # -- setup --------------------------------------------------------------------------
    def setup(self) -> None:
        """Resolve the model and open the trace (the collector must be bound by now)."""
        from compile_ahead import itt_collector

        problem = itt_collector.collector_status().problem()
        if problem is not None:
            raise CompileAheadError(problem)
        self.foreign = model_file(self.settings.model)
        if self.foreign is not None:
            described, label = self._as_it_is()
        else:
            described, label = self._decoder()
        if self.options.extra_config:
            pairs = ", ".join(f"{k}={v}" for k, v in self.options.extra_config.items())
            print(f"OpenVINO properties: {pairs}")
        self.report = self._report_head(described, label)
        self.trace = ProfileTrace(
            self.staging, self.options.device, label, self.report["model"],
            self.options.extra_config, self.settings.steps_per_slice,
        )  # fmt: skip
        self.rungs = RungProfiler(
            self.trace, self.options, self.pass_file, self.report["rungs"], self.report["decode"]
        )
        if self.foreign is None:
            self.compile_rung = self._rung_compiler()

    def _as_it_is(self) -> tuple[dict, str]:
        """A model that is not a stateful decoder, compiled as it is: what it is called."""
        given, foreign = self.settings, self.foreign
        if given.schedule is not None:
            raise CompileAheadError(
                f"--schedule: {given.model} is not a stateful decoder: it has no ladder to run"
            )
        if given.synthetic_dtype is not None:
            raise CompileAheadError(
                f"--synthetic-dtype: {given.model} is compiled as it is, with its own weights"
            )
        if given.graph_kind != "decode":
            raise CompileAheadError(
                f"--graph-kind {given.graph_kind}: {given.model} is compiled as it is; "
                "decode and prefill graphs are a stateful decoder's"
            )
        self.shapes = parse_shapes(list(given.shapes))
        described = {"model": str(foreign), "synthetic": False, "origin": "as given"}
        label = f"{foreign} [compiled as it is: not a stateful decoder]"
        print(f"model: {label}")
        print(f"device: {self.options.device}, inference precision "
              f"{self.options.inference_precision}")  # fmt: skip
        return described, label

    def _decoder(self) -> tuple[dict, str]:
        """The decoder whose rungs are profiled, resolved: what it is called."""
        from compile_ahead.runtime.sources.resolve import resolve_model

        if self.settings.shapes:
            raise CompileAheadError("--shape is for models compiled as they are, not decoders")
        given = self.settings
        self.source = resolve_model(given.model, synthetic_dtype=given.synthetic_dtype)
        self.config.check_graph_mode(self.source)
        print(f"model: {self.source.label}")
        print(
            f"device: {self.options.device}, inference precision "
            f"{self.options.inference_precision}, ladder {','.join(map(str, self.ladder))}, "
            f"{self.graph} graphs; compile cache off (every rung is really compiled)"
        )
        return self.source.describe(), self.source.label

    def _report_head(self, described: dict, label: str) -> dict[str, Any]:
        from compile_ahead.runtime.compile.rung_builder import decode_defaults

        report: dict[str, Any] = stamped(
            {
                "tool": TOOL,
                "invocation": self.settings.invocation,
                "pid": os.getpid(),
                "model": described,
                "model_label": label,
                "device": self.options.device,
                "inference_precision": self.options.inference_precision,
                "ov_config": self.options.extra_config,
                "decode_defaults": decode_defaults(self.options, self.graph),
                "graph": self.graph,
                "graph_kinds": list(graph_kinds(self.settings.graph_kind)),
                "ladder": self.ladder,
                "decode_tokens": self.settings.decode_tokens,
                "rungs": [],
                "decode": [],
                "error": None,
            }
        )
        if self.settings.py_spy and os.environ.get("COMPILE_AHEAD_PYSPY_CHILD"):
            from compile_ahead.profiling.traces.pyspy import clock_marker

            report["pyspy_marker_ns"] = list(clock_marker())
        return report

    def _rung_compiler(self) -> Callable[..., CompileResult]:
        from compile_ahead.runtime.compile.rung_builder import RungBuilder

        # Split: the first rung's profile includes the weight parts, later rungs only a core.
        return RungBuilder(self.source, self.options, self.graph).build

    # -- the profiled compiles ---------------------------------------------------------------
    def profile_model(self) -> None:
        """One compile of a model that is not a stateful decoder (capacity shown as 0)."""
        assert self.foreign is not None
        self.rungs.model(self.foreign, self.shapes)

    def profile_rung(
        self, capacity: int, prefill: PrefillPlan | None = None, batch: int = 1
    ) -> None:
        """Compile one rung's decode graph for ``batch`` sequences, or its prefill graph as
        ``prefill`` plans it (one sequence), under the counters."""
        given = self.settings
        tokens = None if given.schedule is not None else given.decode_tokens
        self.rungs.rung(self.compile_rung, capacity, prefill, batch, tokens)

    def overlay_schedule(self) -> None:
        """Run the ladder protocol under the schedule, on the same trace."""
        assert self.trace is not None
        overlay_schedule(
            self.report, self.source, self.config, self.trace, self.options.device,
            self.settings.steps_per_slice,
        )  # fmt: skip

    # -- finish -----------------------------------------------------------------------------
    def fail(self, err: CompileAheadError) -> None:
        self.failure = err
        self.report["error"] = str(err)

    def finish(self) -> int:
        """Close the trace, write the report (also of a failed profile: the error is named),
        print the table, publish the directory. A write that fails (disk full, read-only)
        ends in one line naming the file, with the staging directory removed."""
        from compile_ahead.profiling.perfetto.validate import OPEN_TRACE_HINT

        trace = self.trace
        assert trace is not None
        trace.sampler.stop()
        if trace.sampler.error is not None and self.failure is None:
            self.fail(CompileAheadError(f"the RSS counter failed: {trace.sampler.error}"))
        target = destination(self.out, self.failure is None, is_dir=True)
        trace_error = None
        try:
            trace.writer.close()  # ends what is open: valid up to a failure
        except OutputWriteError as err:
            trace_error = write_error_at(err, self.staging, target)
        self._report_process(target)
        validation = None
        if trace_error is None:
            validation, self.report["trace"] = trace.validated(target)
        by_batch = self.settings.batches != (1,)
        print_tables(self.report, self.rungs.pass_profiles, self.settings.top, by_batch)
        if trace_error is not None:
            self.abandon()
            if self.failure is not None:  # both said: what stopped the profile, and the write
                raise OutputWriteError(f"{self.failure}; and {trace_error}")
            raise trace_error
        assert validation is not None
        print(validation.summary().splitlines()[0])
        if self.failure is None and not validation.ok:
            self.fail(CompileAheadError(f"the trace failed validation: {validation.errors[0]}"))
            target = destination(self.out, False, is_dir=True)
            self.report["trace"]["path"] = str(target / TRACE_NAME)
        self._publish(target)
        print(f"report: {self.out / REPORT_NAME}")
        print(f"trace: {self.out / TRACE_NAME}; {OPEN_TRACE_HINT}")
        return 0

    def _report_process(self, target: Path) -> None:
        """What the process as a whole did: peak RSS, the collector, the pass profile."""
        from compile_ahead import itt_collector
        from compile_ahead.runtime.base.measure import peak_rss_bytes

        r = self.report
        r["peak_rss_bytes"] = peak_rss_bytes()
        r["collector"] = {
            "path": itt_collector.collector_status().path,
            "bound_libraries": list(itt_collector.collector_status().bound_libraries),
        }
        r["depsort_counters"] = depsort_reading().to_json()
        has_passes = self.pass_file is not None and self.pass_file.exists()
        r["pass_profile_file"] = str(target / PASSES_NAME) if has_passes else None
        r["top_passes"] = None
        if self.rungs.pass_profiles:
            totals = passprofile.pass_self_totals(self.rungs.pass_profiles)
            r["top_passes"] = {
                "top": self.settings.top,
                "passes": len(totals),
                "self_s_all_passes": sum(t.self_ns for t in totals) / 1e9,
                "rows": [t.to_json() for t in totals[: self.settings.top]],
            }

    def _publish(self, target: Path) -> None:
        """Write the report and publish the directory; a failed profile is raised after."""
        try:
            write_json_atomic(self.staging / REPORT_NAME, self.report)
        except OutputWriteError as err:
            self.abandon()
            raise write_error_at(err, self.staging, target) from None
        publish_dir(self.staging, target)
        if self.failure is not None:
            print(f"the failed profile is in {target}; {self.out} is untouched")
            raise self.failure

    def abandon(self) -> None:
        """Leave no staging directory behind (setup failed, or the output cannot be written)."""
        if self.trace is not None:
            self.trace.writer.discard()
        shutil.rmtree(self.staging, ignore_errors=True)


def write_error_at(err: OutputWriteError, staging: Path, target: Path) -> OutputWriteError:
    """The same error, naming where the file was to be published instead of the staging
    directory the user never sees."""
    return OutputWriteError(str(err).replace(str(staging), str(target)))
