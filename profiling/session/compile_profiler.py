"""One profile-compile session: set up, profile each rung, optionally overlay a schedule's run,
then finish by writing the report and publishing the output directory whole.

Everything is written into a staging directory beside ``--out``; finish() swaps it in, so a
reader never sees half a profile and a failed profile never replaces a good one (it is kept
at ``<out>.failed`` instead).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from dataclasses import dataclass
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
from compile_ahead.profiling.session.foreign_model import compile_foreign, model_file, parse_shapes
from compile_ahead.runtime.compile.settings.device_defaults import PREFILL_CHUNKS, default_prefill
from compile_ahead.runtime.ladder.capacities import Ladder

if TYPE_CHECKING:  # openvino must not load before the collector is armed
    from collections.abc import Callable

    from compile_ahead.profiling.perfetto.validate import TraceReport
    from compile_ahead.profiling.session.rung_profile import RungProfile
    from compile_ahead.runtime.compile.graph.result import CompileResult
    from compile_ahead.runtime.compile.settings.modes import GraphMode
    from compile_ahead.runtime.ladder.config import RunConfig
    from compile_ahead.runtime.ladder.prefill import PrefillPlan

GRAPH_KINDS = {"decode": ("decode",), "prefill": ("prefill",), "both": ("decode", "prefill")}


def graph_kinds(choice: str) -> tuple[str, ...]:
    return GRAPH_KINDS[choice]


def prefill_plan(device: str, capacity: int, chunk: int | None, shape: str | None) -> PrefillPlan:
    """The prefill graph profiled on a rung: the one a run on ``device`` compiles for a long
    prompt (the device's shape and the shape's chunk, device_defaults.py) unless
    --prefill-shape or --prefill-chunk say otherwise. Capped at the rung, as a run's chunk is."""
    from compile_ahead.runtime.compile.settings.modes import PrefillShape
    from compile_ahead.runtime.ladder.prefill import PrefillPlan

    kind = PrefillShape(shape) if shape is not None else default_prefill(device).shape
    size = chunk or PREFILL_CHUNKS[kind]
    return PrefillPlan(min(capacity, size), kind, "default" if shape is None else "flag")


@dataclass(frozen=True)
class ProfileOptions:
    """profile-compile's own settings (what the run configuration does not say), settled by
    the command from its flags."""

    out: Path  # the profile directory, published whole
    model: str
    schedule: str | None  # the schedule whose run is overlaid, if any
    synthetic_dtype: str | None
    graph_kind: str  # a key of GRAPH_KINDS
    shapes: tuple[str, ...]  # --shape items, for a model compiled as it is
    decode_tokens: int | None  # steps timed per rung (without a schedule)
    pass_profile: bool  # time OpenVINO's passes in each profiled compile
    py_spy: bool  # sampled by py-spy (its marker goes in the report)
    steps_per_slice: int
    top: int  # rows of the top-passes table
    invocation: dict[str, object] | None  # how the command was started
    batches: tuple[int, ...] = (1,)  # each rung's decode graph is profiled at each B


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
        self.writer: Any = None  # the TraceWriter, once setup() opens it
        try:
            mark_output_dir(self.staging)  # published whole: the marker makes it replaceable
        except OutputWriteError as err:
            self.abandon()
            raise write_error_at(err, self.staging, self.out) from None
        # On for each profiled compile only (passprofile.recording_passes).
        self.pass_file = None if not settings.pass_profile else self.staging / PASSES_NAME
        self.report: dict[str, Any] = {}
        self.failure: CompileAheadError | None = None
        # Each profiled compile's passes, for the table of the passes that took most time.
        self.pass_profiles: list[passprofile.PassProfile] = []

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
        self._open_trace(label)
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

    def _open_trace(self, label: str) -> None:
        from compile_ahead.profiling.perfetto.writer import (
            GRAPHS_RESIDENT,
            PROCESS_RSS_BYTES,
            TOKENS_PER_S,
            TraceWriter,
        )
        from compile_ahead.profiling.session.rss import RssSampler
        from compile_ahead.profiling.traces.decode_steps import StepSlicer

        self.writer = w = TraceWriter(self.staging / TRACE_NAME, process_name="profile-compile")
        self.device_track = w.device_track(self.options.device)
        w.instant(
            self.device_track,
            f"model: {label}",
            None,
            {**self.report["model"], "ov_config": json.dumps(self.options.extra_config)},
        )
        self.rss_track = w.counter_track(PROCESS_RSS_BYTES)
        self.graphs_track = w.counter_track(GRAPHS_RESIDENT)
        self.slicer = StepSlicer(
            w, self.device_track, self.settings.steps_per_slice, w.counter_track(TOKENS_PER_S)
        )
        self.sampler = RssSampler(0.05, on_sample=lambda ts, v: w.counter(self.rss_track, ts, v))
        self.sampler.start()
        w.counter(self.graphs_track, None, 0)

    def _rung_compiler(self) -> Callable[..., CompileResult]:
        from compile_ahead.runtime.compile.rung_builder import RungBuilder

        # Split: the first rung's profile includes the weight parts, later rungs only a core.
        return RungBuilder(self.source, self.options, self.graph).build

    # -- a model compiled as it is -------------------------------------------------------
    def profile_model(self) -> None:
        """One compile of a model that is not a stateful decoder (capacity shown as 0)."""
        from compile_ahead import itt_collector
        from compile_ahead.profiling.session.progress_line import ProgressLine
        from compile_ahead.profiling.session.rung_profile import profile_rung
        from compile_ahead.profiling.traces.compile_jobs import begin_job, end_job

        foreign = self.foreign
        assert foreign is not None
        w = self.writer
        job = begin_job(w, 0, time.monotonic_ns(), label=foreign.name)
        try:
            with (
                ProgressLine(f"compiling {foreign.name}"),
                passprofile.recording_passes(self.pass_file),
            ):
                profile, result = profile_rung(
                    lambda: compile_foreign(foreign, self.shapes, self.options),
                    0,
                    self.pass_file,
                    self.sampler,
                )
        except CompileAheadError as err:
            w.slice_end(job, None, args={"error": str(err)})
            raise
        names = itt_collector.thread_names({e.tid for e in profile.spans})
        end_job(w, job, profile, names)
        self._keep_passes(profile)
        row = {**profile.to_json(), "kind": "as-is", "chunk": None}
        self.report["rungs"].append({**row, "model_file": str(self.foreign)})
        del result

    def _keep_passes(self, profile: RungProfile) -> None:
        if profile.passes is not None:
            self.pass_profiles.append(profile.passes)

    # -- one rung -------------------------------------------------------------------------
    def profile_rung(
        self, capacity: int, prefill: PrefillPlan | None = None, batch: int = 1
    ) -> None:
        """Compile one rung's decode graph for ``batch`` sequences, or its prefill graph as
        ``prefill`` plans it (one sequence), under the counters."""
        from compile_ahead import itt_collector
        from compile_ahead.profiling.session.progress_line import ProgressLine
        from compile_ahead.profiling.session.rung_profile import profile_rung
        from compile_ahead.profiling.traces.compile_jobs import begin_job, end_job
        from compile_ahead.runtime.graphs.spec import GraphSpec

        w = self.writer
        kv = self.options.kv_precision
        assert kv is not None
        if prefill is None:
            spec = GraphSpec(capacity, 1, kv, batch=batch)
        else:
            spec = prefill.spec(capacity, kv)
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
                    lambda: self.compile_rung(spec), capacity, self.pass_file, self.sampler
                )
        except CompileAheadError as err:
            w.slice_end(job, None, args={"error": str(err)})
            raise
        # Decode steps are timed on decode graphs only.
        given = self.settings
        tokens = 0 if given.schedule is not None or chunk > 1 else given.decode_tokens
        flow = w.new_flow()
        names = itt_collector.thread_names({e.tid for e in profile.spans})
        # A patched NPU compiler's counters, when one is loaded (never zeros in its place).
        depsort = depsort_reading()
        extra = {f"depsort_{k}": v for k, v in (depsort.values or {}).items()}
        end_job(w, job, profile, names, flows_out=[flow] if tokens else (), extra_args=extra)
        w.counter(self.graphs_track, None, 1)
        self._keep_passes(profile)
        self.report["rungs"].append(
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
            decode = self._decode_on_rung(result.step, capacity, tokens, flow, profile.end_ns)
            self.report["decode"].append({"capacity": capacity, "batch": batch, **decode})
        del result  # one rung's compiled weights resident at a time
        w.counter(self.graphs_track, None, 0)

    def _decode_on_rung(
        self, step: Any, capacity: int, tokens: int, flow: int, ready_ns: int
    ) -> dict:
        """Time decode steps of a freshly compiled rung (KV inputs left at their defaults)."""
        import numpy as np

        count = min(tokens, capacity)
        ids = np.ones(step.spec.batch, dtype=np.int64)  # a token per sequence
        first = time.monotonic_ns()
        self.writer.slice(
            self.device_track,
            f"switch to C={capacity}",
            ready_ns,
            max(first, ready_ns),
            args={"rung": capacity},
            flows_in=[flow],
        )
        total_ns = 0
        for i in range(count):
            t0 = time.monotonic_ns()
            step.run(ids, past_length=i)
            t1 = time.monotonic_ns()
            total_ns += t1 - t0
            self.slicer.step(i, t0, t1, capacity)
        self.slicer.flush()
        return {"steps": count, "mean_step_ms": (total_ns / count / 1e6) if count else None}

    # -- the schedule overlay ----------------------------------------------------------------
    def overlay_schedule(self) -> None:
        """Run the ladder protocol under the schedule, on the same trace (the RSS sampler
        already draws the process RSS counter)."""
        from compile_ahead.profiling.traces.ladder_run import TraceRunEvents
        from compile_ahead.runtime.ladder.reporting.events import FanOut
        from compile_ahead.runtime.ladder.reporting.progress import ProgressBar
        from compile_ahead.runtime.ladder.runner import run_ladder

        config = self.config.for_model(self.source)
        name, tokens = config.schedule.name, config.protocol.decode_tokens
        print(f"running the teacher-forced protocol under {name} ({tokens} tokens) ...")
        events = TraceRunEvents(
            self.writer,
            self.options.device,
            self.settings.steps_per_slice,
            skip_counters=frozenset({"rss_bytes"}),
        )
        bar = ProgressBar(tokens)
        try:
            result = run_ladder(self.source, config, FanOut(events, bar))
        finally:
            bar.close()
            events.close()
        print(result.report.summary())
        self.report["run"] = result.report.to_json()
        if result.error is not None:
            raise CompileAheadError(f"the {name} run stopped: {result.error}")

    # -- finish -----------------------------------------------------------------------------
    def fail(self, err: CompileAheadError) -> None:
        self.failure = err
        self.report["error"] = str(err)

    def finish(self) -> int:
        """Close the trace, write the report (also of a failed profile: the error is named),
        print the table, publish the directory. A write that fails (disk full, read-only)
        ends in one line naming the file, with the staging directory removed."""
        from compile_ahead.profiling.perfetto.validate import OPEN_TRACE_HINT

        self.sampler.stop()
        if self.sampler.error is not None and self.failure is None:
            self.fail(CompileAheadError(f"the RSS counter failed: {self.sampler.error}"))
        target = destination(self.out, self.failure is None, is_dir=True)
        trace_error = None
        try:
            self.writer.close()  # ends what is open: valid up to a failure
        except OutputWriteError as err:
            trace_error = write_error_at(err, self.staging, target)
        self._report_process(target)
        validation = None if trace_error is not None else self._report_trace(target)
        self._print_tables()
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
        if self.pass_profiles:
            totals = passprofile.pass_self_totals(self.pass_profiles)
            r["top_passes"] = {
                "top": self.settings.top,
                "passes": len(totals),
                "self_s_all_passes": sum(t.self_ns for t in totals) / 1e9,
                "rows": [t.to_json() for t in totals[: self.settings.top]],
            }

    def _report_trace(self, target: Path) -> TraceReport:
        """The closed trace validated, as it is named where it is published."""
        from compile_ahead.profiling.perfetto.validate import validate_trace

        validation = dataclasses.replace(
            validate_trace(self.staging / TRACE_NAME), path=str(target / TRACE_NAME)
        )
        self.report["trace"] = {
            "path": str(target / TRACE_NAME),
            "valid": validation.ok,
            "errors": validation.errors,
            "slices": validation.slices,
            "counter_values": validation.counter_values,
            "flows": validation.flows,
            "tracks": validation.tracks,
        }
        return validation

    def _print_tables(self) -> None:
        r = self.report
        if r["rungs"]:
            print()
            print(format_table(r["rungs"], by_batch=self.settings.batches != (1,)))
        if self.pass_profiles:
            totals = passprofile.pass_self_totals(self.pass_profiles)
            print()
            print(format_top_passes(totals, self.settings.top, len(r["rungs"])))
        print()
        print(f"peak RSS of the process: {fmt_mb(r['peak_rss_bytes'])} MiB")
        dep = r["depsort_counters"]
        if dep["available"]:
            print(f"NPU compiler dependency-sort counters: {dep}")

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
        if self.writer is not None:
            self.writer.discard()
        shutil.rmtree(self.staging, ignore_errors=True)


def write_error_at(err: OutputWriteError, staging: Path, target: Path) -> OutputWriteError:
    """The same error, naming where the file was to be published instead of the staging
    directory the user never sees."""
    return OutputWriteError(str(err).replace(str(staging), str(target)))


def fmt_mb(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:.0f}"


def format_table(rungs: list[dict], by_batch: bool = False) -> str:
    """A row per profiled compile; ``by_batch``: with a B column (rungs profiled at several
    B, or at one B above 1)."""
    head = (
        "rung C",
        *(("B",) if by_batch else ()),
        "kind",
        "total s",
        "build s",
        "compile_model s",
        "transforms s",
        "dnnl create s*",
        "other s",
        "peak RSS MiB",
        "RSS +MiB",
    )
    rows = []
    for r in rungs:
        ph = r["phases_ns"]
        rows.append(
            (
                str(r["capacity"]),
                *((str(r.get("batch", 1)),) if by_batch else ()),
                _kind(r),
                _fmt_s(ph["total"]),
                _fmt_s(ph["build"]),
                _fmt_s(ph["compile_model"]),
                _fmt_s(ph["transformations"]),
                _fmt_s(ph["primitive_create"]),
                _fmt_s(ph["other"]),
                fmt_mb(r["rss_peak_bytes"]),
                fmt_mb(r["rss_after_bytes"] - r["rss_before_bytes"]),
            )
        )
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.append(
        "* oneDNN primitive creation summed over threads; transforms = outermost pass managers; "
        "other = compile_model - transforms - dnnl create"
    )
    return "\n".join(lines)


def format_top_passes(totals: list[passprofile.PassTotal], top: int, compiles: int) -> str:
    """The passes that took most time: self time (without the managers a pass ran) summed over
    managers and compiles, with call counts."""
    shown = totals[:top]
    head = ("self s", "calls", "managers")
    rows = [(f"{t.self_ns / 1e9:.3f}", str(t.calls), str(t.managers)) for t in shown]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = [
        f"passes that took most time: top {len(shown)} of {len(totals)}, self time summed over "
        f"managers and {compiles} compile(s)",
        "  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)) + "  pass",
    ]
    for row, t in zip(rows, shown, strict=True):
        lines.append(
            "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + f"  {t.name}"
        )
    return "\n".join(lines)


def _kind(row: dict) -> str:
    return f"prefill L={row['chunk']}" if row.get("kind") == "prefill" else str(row.get("kind"))


def _fmt_s(ns: int | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e9:.2f}"
