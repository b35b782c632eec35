"""``profile-compile``: compile each ladder rung with compile-phase counters on, print the phase
breakdown, and write a Perfetto trace (``DIR/trace.pftrace``) and ``DIR/report.json``.

The ITT collector and OpenVINO's pass profiling must be armed before openvino loads, so this
module imports nothing from the runtime at import time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compile_ahead.atomic import write_json_atomic
from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.ladder import DEFAULT_LADDER, Ladder
from compile_ahead.runtime.schedules import SCHEDULES, get_schedule

from . import passprofile

DEFAULT_MODEL = "qwen2.5-0.5b"
DEFAULT_OUT = "profile-out"
TRACE_NAME = "trace.pftrace"
REPORT_NAME = "report.json"
PASSES_NAME = "passes.txt"
PYSPY_NAME = "pyspy.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="profile-compile",
        description=(
            "Compile each rung of a KV-capacity ladder with OpenVINO's compile-phase counters on; "
            "print the phase breakdown and write a Perfetto trace plus report.json."
        ),
    )
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"preset, cached hub id or checkpoint directory (default {DEFAULT_MODEL})",
    )
    p.add_argument("--device", default="CPU", choices=("CPU", "NPU"))
    p.add_argument(
        "--ladder",
        default=",".join(map(str, DEFAULT_LADDER)),
        help="comma-separated KV capacities, increasing (default %(default)s)",
    )
    p.add_argument(
        "--schedule",
        default=None,
        choices=sorted(SCHEDULES),
        help="after profiling the compiles, run the ladder protocol with this schedule "
        "(b0, b1, i1, i2, i3) and overlay it on the same trace",
    )
    p.add_argument(
        "--decode-tokens",
        type=int,
        default=None,
        metavar="T",
        help="with --schedule: the protocol's decode steps (default: up to the top rung); "
        "without: decode steps timed on each rung after its compile (default 0)",
    )
    p.add_argument(
        "--prompt-len",
        type=int,
        default=128,
        metavar="P",
        help="with --schedule: teacher-forced prompt tokens (default 128)",
    )
    p.add_argument(
        "--graph",
        choices=("whole", "split"),
        default="whole",
        help="whole graphs per rung (default) or split: weight parts once, attention per rung",
    )
    p.add_argument(
        "--steps-per-slice",
        type=int,
        default=1,
        metavar="N",
        help="one decode slice per N steps, keeps long traces small (default 1)",
    )
    p.add_argument(
        "--py-spy",
        action="store_true",
        help="sample Python stacks with py-spy onto their own trace tracks",
    )
    p.add_argument(
        "--py-spy-rate",
        type=int,
        default=100,
        metavar="HZ",
        help="py-spy samples per second (default 100)",
    )
    p.add_argument(
        "--no-pass-profile",
        action="store_true",
        help="skip OV_ENABLE_PROFILE_PASS (per-transformation timings)",
    )
    p.add_argument(
        "--out", default=DEFAULT_OUT, type=Path, help="output directory (default ./%(default)s)"
    )
    return p


def check_args(args: argparse.Namespace) -> list[int]:
    ladder = list(Ladder.parse(args.ladder).rungs)
    if args.decode_tokens is None and args.schedule is None:
        args.decode_tokens = 0
    if args.decode_tokens is not None and args.decode_tokens < 0:
        raise CompileAheadError(f"--decode-tokens must be >= 0, got {args.decode_tokens}")
    if args.steps_per_slice < 1:
        raise CompileAheadError(f"--steps-per-slice must be >= 1, got {args.steps_per_slice}")
    if not 1 <= args.py_spy_rate <= 10000:
        raise CompileAheadError(f"--py-spy-rate must be in 1..10000, got {args.py_spy_rate}")
    if args.out.exists() and not args.out.is_dir():
        raise CompileAheadError(f"--out {args.out}: exists and is not a directory")
    if args.schedule is not None:
        get_schedule(args.schedule)
        if not 0 < args.prompt_len < ladder[-1]:
            raise CompileAheadError(
                f"--prompt-len must be in 1..{ladder[-1] - 1} (below the top rung), "
                f"got {args.prompt_len}"
            )
    return ladder


def _fmt_s(ns: int | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e9:.2f}"


def _fmt_mb(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:.0f}"


def format_table(rungs: list[dict]) -> str:
    head = (
        "rung C",
        "total s",
        "build s",
        "compile_model s",
        "transforms s",
        "dnnl create s*",
        "other s",
        "peak RSS MB",
        "RSS +MB",
    )
    rows = []
    for r in rungs:
        ph = r["phases_ns"]
        rows.append(
            (
                str(r["capacity"]),
                _fmt_s(ph["total"]),
                _fmt_s(ph["build"]),
                _fmt_s(ph["compile_model"]),
                _fmt_s(ph["transformations"]),
                _fmt_s(ph["primitive_create"]),
                _fmt_s(ph["other"]),
                _fmt_mb(r["rss_peak_bytes"]),
                _fmt_mb(r["rss_after_bytes"] - r["rss_before_bytes"]),
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


def _arm_pass_profile(out: Path, enabled: bool) -> Path | None:
    if not enabled:
        return None
    if "openvino" in sys.modules:
        raise CompileAheadError("openvino is already loaded: pass profiling cannot be enabled")
    # OpenVINO appends here; published as PASSES_NAME when the run ends, so a run that fails
    # early leaves the previous run's file alone.
    path = out / (PASSES_NAME + ".partial")
    path.unlink(missing_ok=True)
    os.environ[passprofile.ENV] = str(path)
    return path


def _decode_on_rung(
    writer, device_track, slicer, step, capacity: int, tokens: int, flow: int, ready_ns: int
) -> dict:
    """Time decode steps of a freshly compiled rung (KV inputs left at their defaults)."""
    import numpy as np

    count = min(tokens, capacity)
    ids = np.array([1], dtype=np.int64)
    first = time.monotonic_ns()
    writer.slice(
        device_track,
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
        slicer.step(i, t0, t1, capacity)
    slicer.flush()
    return {"steps": count, "mean_step_ms": (total_ns / count / 1e6) if count else None}


def run_profile(args: argparse.Namespace, ladder: list[int]) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    pass_file = _arm_pass_profile(out, not args.no_pass_profile)

    from . import counters
    from .compile_profile import profile_rung
    from .progress_line import ProgressLine
    from .rss import RssSampler
    from .trace_compile import begin_job, end_job
    from .trace_decode import StepSlicer
    from .trace_validate import validate_trace
    from .trace_writer import GRAPHS_RESIDENT, PROCESS_RSS_BYTES, TOKENS_PER_S, TraceWriter

    status = counters.collector_status()
    problem = status.problem()
    if problem is not None:
        raise CompileAheadError(problem)

    from compile_ahead.runtime.compiler import CompileOptions, compile_step
    from compile_ahead.runtime.graphs import GraphSpec
    from compile_ahead.runtime.sources import resolve_model

    source = resolve_model(args.model)
    options = CompileOptions(device=args.device).resolved()
    print(f"model: {source.label}")
    print(
        f"device: {options.device}, inference precision {options.inference_precision}, "
        f"ladder {','.join(map(str, ladder))}"
    )

    report: dict[str, Any] = {
        "tool": "profile-compile",
        "pid": os.getpid(),
        "model": source.describe(),
        "model_label": source.label,
        "device": options.device,
        "inference_precision": options.inference_precision,
        "ladder": ladder,
        "decode_tokens": args.decode_tokens,
        "rungs": [],
        "decode": [],
        "error": None,
    }
    if args.py_spy and os.environ.get("COMPILE_AHEAD_PYSPY_CHILD"):
        from .pyspy import clock_marker

        report["pyspy_marker_ns"] = list(clock_marker())

    trace_path = out / TRACE_NAME
    writer = TraceWriter(trace_path)
    rss_track = writer.counter_track(PROCESS_RSS_BYTES)
    graphs_track = writer.counter_track(GRAPHS_RESIDENT)
    device_track = writer.device_track(options.device)
    tokens_track = writer.counter_track(TOKENS_PER_S)
    slicer = StepSlicer(writer, device_track, args.steps_per_slice, tokens_track)
    sampler = RssSampler(0.05, on_sample=lambda ts, v: writer.counter(rss_track, ts, v)).start()
    writer.counter(graphs_track, None, 0)
    resident = 0
    failure: CompileAheadError | None = None
    # With a schedule the protocol does the decoding; without, each rung is timed alone.
    per_rung_tokens = 0 if args.schedule is not None else args.decode_tokens
    if args.graph == "split":
        compile_rung = split_compiler(source, options)
    else:
        compile_rung = lambda spec: compile_step(source, spec, options)  # noqa: E731
    try:
        for capacity in ladder:
            spec = GraphSpec(capacity=capacity, chunk=1, kv_precision=options.kv_precision)
            job = begin_job(writer, capacity, time.monotonic_ns())
            try:
                with (
                    ProgressLine(f"compiling C={capacity} for {options.device}"),
                    passprofile.without_pass_banners(),
                ):
                    profile, result = profile_rung(
                        lambda spec=spec: compile_rung(spec),
                        capacity,
                        pass_file,
                        sampler,
                    )
            except CompileAheadError as err:
                writer.slice_end(job, None, args={"error": str(err)})
                raise
            flow = writer.new_flow()
            names = counters.thread_names({e.tid for e in profile.spans})
            # A patched NPU compiler's counters, when one is loaded (never zeros in its place).
            depsort = counters.depsort_counters()
            extra = {f"depsort_{k}": v for k, v in (depsort.values or {}).items()}
            end_job(
                writer,
                job,
                profile,
                names,
                flows_out=[flow] if per_rung_tokens else (),
                extra_args=extra,
            )
            resident += 1
            writer.counter(graphs_track, None, resident)
            report["rungs"].append({**profile.to_json(), "depsort_counters": depsort.to_json()})
            if per_rung_tokens:
                report["decode"].append(
                    {
                        "capacity": capacity,
                        **_decode_on_rung(
                            writer,
                            device_track,
                            slicer,
                            result.step,
                            capacity,
                            per_rung_tokens,
                            flow,
                            profile.end_ns,
                        ),
                    }
                )
            del result  # one rung's compiled weights resident at a time
            resident -= 1
            writer.counter(graphs_track, None, resident)
        if args.schedule is not None:
            report["run"] = overlay_schedule(args, source, options, ladder, writer)
            if report["run"].get("error"):
                raise CompileAheadError(
                    f"the {args.schedule} run stopped: {report['run']['error']}"
                )
    except CompileAheadError as err:
        failure = err
        report["error"] = str(err)
    finally:
        sampler.stop()
        writer.close()
    report["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    report["collector"] = {
        "path": status.path,
        "bound_libraries": list(counters.collector_status().bound_libraries),
    }
    report["depsort_counters"] = counters.depsort_counters().to_json()
    if pass_file is not None and pass_file.exists():
        pass_file = pass_file.replace(out / PASSES_NAME)
    report["pass_profile_file"] = str(pass_file) if pass_file else None
    validation = validate_trace(trace_path)
    report["trace"] = {
        "path": str(trace_path),
        "valid": validation.ok,
        "errors": validation.errors,
        "slices": validation.slices,
        "counter_values": validation.counter_values,
        "flows": validation.flows,
        "tracks": validation.tracks,
    }
    write_json_atomic(out / REPORT_NAME, report)

    if report["rungs"]:
        print()
        print(format_table(report["rungs"]))
    print()
    print(f"peak RSS of the process: {_fmt_mb(report['peak_rss_bytes'])} MB")
    dep = report["depsort_counters"]
    print(
        f"NPU compiler dependency-sort counters: "
        f"{'available' if dep['available'] else 'unavailable'} ({dep['reason']})"
    )
    print(validation.summary().splitlines()[0])
    if failure is not None:
        raise failure
    if not validation.ok:
        raise CompileAheadError(f"the trace failed validation: {validation.errors[0]}")
    print(f"report: {out / REPORT_NAME}")
    print(
        f"open the trace: drag {trace_path} into https://ui.perfetto.dev (loads locally, "
        "nothing is uploaded)"
    )
    return 0


def split_compiler(source, options):
    """Split mode: the first call compiles the weight parts (inside the first rung's profile),
    every call compiles one attention core."""
    from compile_ahead.runtime.compiler import CompileResult
    from compile_ahead.runtime.split_step import WeightParts, compile_attention_core

    parts: list[WeightParts] = []

    def compile_rung(spec):
        if not parts:
            parts.append(WeightParts(source, options))
        return CompileResult(compile_attention_core(parts[0], spec, options), 0.0, 0.0)

    return compile_rung


def overlay_schedule(args: argparse.Namespace, source, options, ladder: list[int], writer) -> dict:
    """Run the ladder protocol under the schedule, on the same trace (the RSS sampler already
    draws the process RSS counter)."""
    from compile_ahead.runtime.events import FanOut
    from compile_ahead.runtime.ladder_runner import RunSettings, run_ladder
    from compile_ahead.runtime.progress import ProgressBar
    from compile_ahead.runtime.protocol import teacher_forced

    from .run_trace import TraceRunEvents

    tokens = args.decode_tokens if args.decode_tokens is not None else ladder[-1] - args.prompt_len
    protocol = teacher_forced(source.config.vocab_size, args.prompt_len, tokens)
    settings = RunSettings(
        get_schedule(args.schedule), Ladder(tuple(ladder)), protocol, graph=args.graph
    )
    print(f"running the teacher-forced protocol under {args.schedule} ({tokens} tokens) ...")
    events = TraceRunEvents(
        writer, options.device, args.steps_per_slice, skip_counters=frozenset({"rss_bytes"})
    )
    bar = ProgressBar(tokens)
    try:
        result = run_ladder(source, options, settings, FanOut(events, bar))
    finally:
        bar.close()
        events.close()
    from compile_ahead.runtime.cli_run import summarize

    print(summarize(result.report))
    return result.report


def run_under_pyspy(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Re-run this command under py-spy, then put its samples on the child's trace."""
    import shutil

    from .pyspy import PYSPY_ENV, emit_samples, load_samples
    from .trace_validate import validate_trace
    from .trace_writer import TraceWriter

    if shutil.which("py-spy") is None:
        raise CompileAheadError("--py-spy: py-spy is not installed (pip install py-spy)")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    samples_path = out / PYSPY_NAME
    samples_path.unlink(missing_ok=True)
    cmd = [
        "py-spy",
        "record",
        "--format",
        "chrometrace",
        "--output",
        str(samples_path),
        "--rate",
        str(args.py_spy_rate),
        "--idle",
        "--nonblocking",
        "--",
        sys.executable,
        "-m",
        "compile_ahead.profiling.cli",
        *argv,
    ]
    env = {**os.environ, PYSPY_ENV: "1"}
    code = subprocess.call(cmd, env=env)
    report_path = out / REPORT_NAME
    if not samples_path.exists() or not report_path.exists():
        raise CompileAheadError(f"--py-spy: the profiled run failed (exit status {code})")
    report = json.loads(report_path.read_text())
    marker = report.get("pyspy_marker_ns")
    if not marker:
        raise CompileAheadError("--py-spy: the child run recorded no clock marker")
    samples = load_samples(samples_path, (int(marker[0]), int(marker[1])))
    trace_path = out / TRACE_NAME
    writer = TraceWriter(trace_path, append=True, pid=report.get("pid"))
    spans = emit_samples(writer, samples)
    writer.close()
    validation = validate_trace(trace_path)
    period_ms = 1000 / args.py_spy_rate
    report["pyspy"] = {
        "samples_file": str(samples_path),
        "rate_hz": args.py_spy_rate,
        "spans": spans,
        "offset_ns": samples.offset_ns,
        "spread_ns": samples.spread_ns,
        "accuracy_note": f"slice edges late by up to one sample period ({period_ms:.0f} ms); "
        "offset uncertain by about one period plus half the spread",
    }
    report["trace"]["valid"] = validation.ok
    report["trace"]["errors"] = validation.errors
    write_json_atomic(report_path, report)
    spread_ms = abs(samples.spread_ns) / 1e6
    print(
        f"py-spy: {spans} sampled frames on the trace; alignment within about "
        f"{period_ms + spread_ms / 2:.0f} ms (period {period_ms:.0f} ms, edge spread "
        f"{spread_ms:.1f} ms)"
    )
    if not validation.ok:
        raise CompileAheadError(f"the trace failed validation: {validation.errors[0]}")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    from compile_ahead.cli import run_command

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)

    def run(args: argparse.Namespace) -> int:
        ladder = check_args(args)
        if args.py_spy and not os.environ.get("COMPILE_AHEAD_PYSPY_CHILD"):
            return run_under_pyspy(args, argv)
        return run_profile(args, ladder)

    args.func = run
    return run_command(args, "profile-compile")


if __name__ == "__main__":
    sys.exit(main())
