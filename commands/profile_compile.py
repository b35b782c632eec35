"""``profile-compile``: compile each ladder rung with compile-phase counters on, print the phase
breakdown, and write a Perfetto trace (``DIR/trace.pftrace``) and ``DIR/report.json``.

The ITT collector and OpenVINO's pass profiling must be armed before openvino loads, so this
module imports nothing from the runtime at import time.
"""

from __future__ import annotations

from compile_ahead.errors import CompileAheadError

TYPE_CHECKING = False  # typing itself takes time to import
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from pathlib import Path

    from compile_ahead.profiling.session.profile_options import ProfileOptions
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.ladder.settings.config import RunConfig

# Everything else is imported where used: the console script notes the interrupt signals
# (early_signals.py) before it loads anything that takes time, and a command handles them
# from its first line (run_command), so nothing heavy is imported before it runs.

DEFAULT_OUT = "profile-out"
DEFAULT_TOP_PASSES = 10
PYSPY_NAME = "pyspy.json"


def build_parser() -> argparse.ArgumentParser:
    from compile_ahead.commands.options import (
        add_graph_option,
        add_ladder_option,
        add_model_options,
        add_ov_config_options,
        add_protocol_options,
        add_synthetic_dtype_option,
    )
    from compile_ahead.commands.parsers import ExactParser
    from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES

    p = ExactParser(
        prog="profile-compile",
        description=(
            "Compile each rung of a KV-capacity ladder with OpenVINO's compile-phase counters on; "
            "print the phase breakdown and write a Perfetto trace plus report.json."
        ),
    )
    add_model_options(p, cache=False)  # profiles real compiles: a cached import is not one
    add_ov_config_options(p)
    add_synthetic_dtype_option(p)
    add_ladder_option(p, auto=False)
    p.add_argument(
        "--schedule",
        default=None,
        choices=sorted(SCHEDULES),
        help="after profiling the compiles, run the ladder protocol with this schedule "
        "(b0, b1, i1, i2, i3) and overlay it on the same trace",
    )
    add_protocol_options(
        p,
        decode_help="with --schedule: the protocol's decode steps (default: up to the top "
        "rung); without: decode steps timed on each rung after its compile (default 0)",
    )
    add_graph_option(p)
    _add_graph_kinds(p)
    _add_trace_options(p)
    p.set_defaults(invocation=None)  # main() records how the command was started
    return p


def _add_graph_kinds(p: argparse.ArgumentParser) -> None:
    """Which graphs of each rung are profiled, and a model compiled as it is."""
    from compile_ahead.commands.batch_options import batch_sizes
    from compile_ahead.profiling.session.profile_options import GRAPH_KINDS
    from compile_ahead.runtime.compile.settings.modes import PrefillShape, choices

    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=[d0,d1,...]",
        help="a model that is not a stateful decoder (any IR or ONNX) is compiled as it is; "
        "give each dynamic input a static shape, e.g. --shape input_ids=[1,128]",
    )
    p.add_argument(
        "--batch",
        type=batch_sizes,
        default=None,
        metavar="B[,B...]",
        help="profile [B, C] decode graphs (B sequences per step), each rung at each B given "
        "(e.g. 1,8: a row per rung and B); with --schedule (one B) the run decodes B copies "
        "of its prompt (default 1)",
    )
    p.add_argument(
        "--graph-kind",
        choices=sorted(GRAPH_KINDS),
        default="decode",
        help="which graphs of each rung to profile: decode steps, prefill chunks, or both "
        "(default decode)",
    )
    p.add_argument(
        "--prefill-chunk",
        type=int,
        default=None,
        metavar="L",
        help="with --graph-kind prefill|both: tokens per prefill call (default: the device's, "
        "as a run with a long prompt compiles it; capped at each rung)",
    )
    p.add_argument(
        "--prefill-shape",
        choices=choices(PrefillShape),
        default=None,
        help="with --graph-kind prefill|both: the prefill graph's shape, as `run "
        "--prefill-shape` (default: the device's)",
    )


def _add_trace_options(p: argparse.ArgumentParser) -> None:
    """What is recorded and where the profile goes."""
    from pathlib import Path

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
        "--top",
        type=int,
        default=DEFAULT_TOP_PASSES,
        metavar="N",
        help="print the N passes that took most time (self time summed over managers and "
        f"compiles, with call counts; default {DEFAULT_TOP_PASSES})",
    )
    p.add_argument(
        "--no-pass-profile",
        action="store_true",
        help="skip OV_ENABLE_PROFILE_PASS (per-transformation timings)",
    )
    p.add_argument(
        "--out", default=DEFAULT_OUT, type=Path, help="output directory (default ./%(default)s)"
    )
    p.add_argument(
        "--open",
        action="store_true",
        help="then open the trace in the Perfetto UI (as `compile-ahead trace open`)",
    )


def check_args(args: argparse.Namespace) -> RunConfig:
    """Every flag checked before any work, each B given (``args.batches``) against the device;
    the run configuration of the first B (its ladder the rungs to profile, its schedule the
    overlay's)."""
    from compile_ahead.commands.options import compile_options, model_inputs
    from compile_ahead.output.checks import check_not_inputs, check_replaceable_dir
    from compile_ahead.profiling.session.profile_options import graph_kinds

    if args.decode_tokens is None and args.schedule is None:
        args.decode_tokens = 0
    _check_profile_flags(args)
    # Replaced whole when the profile is published: only an earlier profile may be there (and
    # at the failed profile's place beside it).
    check_replaceable_dir(args.out, "--out")
    check_not_inputs({"--out": args.out}, model_inputs(args))
    options = compile_options(args)
    args.batches = args.batch or (None,)  # None: the configuration's own (one sequence)
    configs = [_config_at(args, options, batch) for batch in args.batches]
    if "prefill" in graph_kinds(args.graph_kind) and configs[0].graph == "split":
        raise CompileAheadError(
            f"--graph-kind {args.graph_kind}: a prefill graph exists only whole; use --graph whole"
        )
    return configs[0]


def _config_at(args: argparse.Namespace, options: CompileOptions, batch: int | None) -> RunConfig:
    """The run configuration of one B (checked, the device asked whether it takes B)."""
    import argparse

    from compile_ahead.commands.options import run_config_from_args
    from compile_ahead.profiling.session.profile_options import graph_kinds

    if batch is not None and batch > 1 and "prefill" in graph_kinds(args.graph_kind):
        raise CompileAheadError(
            f"--batch {batch}: prefill graphs take one sequence; use --graph-kind decode"
        )
    return run_config_from_args(
        argparse.Namespace(**{**vars(args), "batch": batch}),
        args.schedule,
        options,
        # A profiled prefill graph's chunk is capped at each rung (prefill_plan); the overlay
        # run prefills as a run does. Without --schedule, --decode-tokens times steps per rung.
        prefill_chunk=None,
        prefill_shape=None,
        decode_tokens=args.decode_tokens if args.schedule is not None else None,
    )


def _check_profile_flags(args: argparse.Namespace) -> None:
    """The flags only profile-compile has."""
    from compile_ahead.profiling.session.profile_options import graph_kinds

    if args.decode_tokens is not None and args.decode_tokens < 0:
        raise CompileAheadError(f"--decode-tokens must be >= 0, got {args.decode_tokens}")
    if args.steps_per_slice < 1:
        raise CompileAheadError(f"--steps-per-slice must be >= 1, got {args.steps_per_slice}")
    if not 1 <= args.py_spy_rate <= 10000:
        raise CompileAheadError(f"--py-spy-rate must be in 1..10000, got {args.py_spy_rate}")
    if args.top < 1:
        raise CompileAheadError(f"--top must be >= 1, got {args.top}")
    kinds = graph_kinds(args.graph_kind)
    if args.prefill_chunk is not None:
        if args.prefill_chunk < 2:
            raise CompileAheadError(
                f"--prefill-chunk must be >= 2 (1 is a decode step), got {args.prefill_chunk}"
            )
        if "prefill" not in kinds:
            raise CompileAheadError("--prefill-chunk is for --graph-kind prefill or both")
    if args.prefill_shape is not None and "prefill" not in kinds:
        raise CompileAheadError("--prefill-shape is for --graph-kind prefill or both")
    if args.batch is not None and len(args.batch) > 1 and args.schedule is not None:
        given = ",".join(map(str, args.batch))
        raise CompileAheadError(f"--batch {given}: --schedule overlays one run; give one B")


def profile_options(args: argparse.Namespace) -> ProfileOptions:
    """profile-compile's own flags (check_args checked them) as the session takes them."""
    from compile_ahead.profiling.session.profile_options import ProfileOptions

    return ProfileOptions(
        out=args.out,
        model=args.model,
        schedule=args.schedule,
        synthetic_dtype=args.synthetic_dtype,
        graph_kind=args.graph_kind,
        shapes=tuple(args.shape),
        decode_tokens=args.decode_tokens,
        pass_profile=not args.no_pass_profile,
        py_spy=args.py_spy,
        steps_per_slice=args.steps_per_slice,
        top=args.top,
        batches=tuple(b or 1 for b in args.batches),
        invocation=args.invocation,
    )


def run_profile(args: argparse.Namespace, config: RunConfig) -> int:
    """Setup, a step per rung, the optional schedule overlay, then finish (publish whole)."""
    from compile_ahead.interrupts import hold, release
    from compile_ahead.profiling.perfetto.writer import TraceWriteError
    from compile_ahead.profiling.session.compile_profiler import CompileProfiler
    from compile_ahead.profiling.session.profile_options import graph_kinds, prefill_plan

    profiler = CompileProfiler(profile_options(args), config)
    try:
        profiler.setup()
    except BaseException:
        profiler.abandon()
        raise
    interrupted = False
    try:
        if profiler.foreign is not None:
            profiler.profile_model()
        for capacity in profiler.ladder if profiler.foreign is None else ():
            for kind in graph_kinds(args.graph_kind):
                if kind == "decode":  # a row per B given
                    for batch in profiler.settings.batches:
                        profiler.profile_rung(capacity, batch=batch)
                    continue
                plan = prefill_plan(args.device, capacity, args.prefill_chunk, args.prefill_shape)
                profiler.profile_rung(capacity, plan)
        if args.schedule is not None:
            profiler.overlay_schedule()
    except CompileAheadError as err:
        profiler.fail(err)
    except TraceWriteError as err:  # what was measured is still reported, with the error
        profiler.fail(CompileAheadError(f"the trace could not be written: {err}"))
    except KeyboardInterrupt:
        interrupted = True
        profiler.fail(CompileAheadError("interrupted"))
    hold()  # the profile is written and published whole: a signal meanwhile acts after it
    try:
        code = profiler.finish()
    except CompileAheadError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    release()
    return code


def run_under_pyspy(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Re-run this command under py-spy, then put its samples on the child's trace."""
    import os
    import subprocess
    import sys

    from compile_ahead.output.paths import temporary_name
    from compile_ahead.profiling.traces.pyspy import PYSPY_ENV, find_pyspy

    pyspy = find_pyspy()
    if pyspy is None:
        raise CompileAheadError("--py-spy: py-spy is not installed (pip install py-spy)")
    out: Path = args.out
    # Beside the output until the child has published it: a failed child's samples never go
    # into an earlier profile.
    out.parent.mkdir(parents=True, exist_ok=True)  # py-spy writes there, it creates no dirs
    samples_path = out.parent / temporary_name(out, ".", ".pyspy.json")
    cmd = [
        pyspy,
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
        "compile_ahead.commands.profile_compile",
        *argv,
    ]
    env = {**os.environ, PYSPY_ENV: "1"}
    try:
        code = subprocess.call(cmd, env=env)
        if code != 0 or not samples_path.exists():
            raise CompileAheadError(f"--py-spy: the profiled run failed (exit status {code})")
        os.replace(samples_path, out / PYSPY_NAME)
    finally:
        samples_path.unlink(missing_ok=True)
    return merge_pyspy(args, out, code)


def merge_pyspy(args: argparse.Namespace, out: Path, code: int) -> int:
    """Put the py-spy samples the child's profile left in ``out`` on its trace and report."""
    import json

    from compile_ahead.output.atomic import write_json_atomic
    from compile_ahead.output.dirs import seal_output_dir
    from compile_ahead.profiling.perfetto.validate import validate_trace
    from compile_ahead.profiling.perfetto.writer import TraceWriter
    from compile_ahead.profiling.results_format.profile import REPORT_NAME, TRACE_NAME
    from compile_ahead.profiling.traces.pyspy import emit_samples, load_samples

    samples_path = out / PYSPY_NAME
    report_path = out / REPORT_NAME
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
    seal_output_dir(out)  # the samples file is the tool's too
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
    import os
    import sys

    from compile_ahead.commands.running import run_command
    from compile_ahead.output.checks import invocation

    argv = list(sys.argv[1:] if argv is None else argv)

    def run(args: argparse.Namespace) -> int:
        config = check_args(args)
        pyspy_child = bool(os.environ.get("COMPILE_AHEAD_PYSPY_CHILD"))
        if args.py_spy and not pyspy_child:
            code = run_under_pyspy(args, argv)
        else:
            code = run_profile(args, config)
        if args.open and code == 0 and not pyspy_child:  # the py-spy parent opens the merge
            from compile_ahead.profiling.perfetto.ui import open_trace
            from compile_ahead.profiling.results_format.profile import TRACE_NAME

            open_trace(args.out / TRACE_NAME)
        return code

    def parse() -> argparse.Namespace:
        args = build_parser().parse_args(argv)
        args.func = run
        args.invocation = invocation("profile-compile", argv)
        return args

    return run_command("profile-compile", parse)


def entry() -> None:
    """The `profile-compile` console script."""
    from compile_ahead.early_signals import note_signals

    note_signals()  # first: a signal while the modules load ends the command with 130
    from compile_ahead.commands.running import console_script

    console_script(main)


if __name__ == "__main__":
    entry()
