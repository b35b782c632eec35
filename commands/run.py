"""`compile-ahead run`: one schedule on the ladder, a progress bar and a JSON run report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from compile_ahead.commands.options import (
    add_graph_option,
    add_ladder_option,
    add_model_options,
    add_ov_config_options,
    add_placement_options,
    add_protocol_options,
    add_run_options,
    add_synthetic_dtype_option,
    compile_options,
    model_inputs,
    resolve_from_args,
    run_config_from_args,
)
from compile_ahead.commands.text_option import add_text_option
from compile_ahead.errors import CompileAheadError
from compile_ahead.interrupts import INTERRUPTED_EXIT, deferred, interrupted, release
from compile_ahead.output.atomic import write_json_atomic
from compile_ahead.output.checks import (
    check_distinct,
    check_not_inputs,
    check_output_file,
    destination,
)
from compile_ahead.runtime.base.measure import now_ns
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES

if TYPE_CHECKING:
    from compile_ahead.runtime.ladder.reporting.events import RunEvents
    from compile_ahead.runtime.ladder.reporting.run_report import RunResult
    from compile_ahead.runtime.ladder.settings.config import RunConfig, SettledRun
    from compile_ahead.runtime.sources.base import ModelSource


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run one schedule on the capacity ladder")
    add_model_options(p)
    add_ov_config_options(p)
    add_synthetic_dtype_option(p)
    p.add_argument(
        "--schedule",
        default="i2",
        choices=sorted(SCHEDULES),
        help="b0 direct, b1 shared-max pyramid, i1 copy-and-grow, i2 one-ahead JIT, "
        "i3 reserve-and-commit (default i2)",
    )
    add_ladder_option(p)
    add_protocol_options(p, per_sequence=True)
    add_run_options(p)
    add_text_option(p)
    add_graph_option(p)
    add_placement_options(p)
    p.add_argument("--report", type=Path, default=None, help="write the JSON run report here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="also write a Perfetto trace of the run here",
    )
    p.add_argument(
        "--steps-per-slice",
        type=int,
        default=1,
        help="with --trace: one decode slice per N steps (keeps long traces small)",
    )
    p.add_argument(
        "--open",
        action="store_true",
        help="with --trace: then open the trace in the Perfetto UI (as `trace open`)",
    )
    p.set_defaults(func=run)


def check_run_outputs(args: argparse.Namespace) -> None:
    """Every output is checked before any work: a bad path must not cost a whole run."""
    if args.report is not None:
        check_output_file(args.report, "--report")
    if args.steps_per_slice < 1:
        raise CompileAheadError(f"--steps-per-slice must be >= 1, got {args.steps_per_slice}")
    if getattr(args, "trace", None) is not None:
        check_output_file(args.trace, "--trace")
    outputs = {"--report": args.report, "--trace": getattr(args, "trace", None)}
    check_distinct(outputs)
    check_not_inputs(outputs, model_inputs(args))


def execute(
    args: argparse.Namespace,
    config: RunConfig,
    events: RunEvents | None = None,
    quiet: bool = False,
) -> tuple[RunResult, ModelSource, SettledRun]:
    """Resolve the model and run; the caller reports (also when the run fails)."""
    # The runner loads OpenVINO: imported where it runs, so that building the parser does not.
    from compile_ahead.runtime.ladder.reporting.events import FanOut
    from compile_ahead.runtime.ladder.reporting.progress import ProgressBar
    from compile_ahead.runtime.ladder.runner import run_ladder

    source = resolve_from_args(args)
    settled = config.for_model(source)
    if not quiet:
        print(f"model: {source.label}", file=sys.stderr)
    total = decode_steps_expected(settled)
    bar = ProgressBar(total, enabled=not quiet and not args.no_progress)
    try:
        # Held from the run's end through its outputs, written whole (run() releases).
        observers = FanOut(bar, events) if events else bar
        result = run_ladder(source, settled, observers, keep_held=True)
    finally:
        bar.close()
    add_texts(result, source)
    return result, source, settled


def add_texts(result: RunResult, source: ModelSource) -> None:
    """A greedy run's generated text per sequence, when the model's tokenizer is known."""
    generated = result.report.generated()
    if not generated or not source.has_tokenizer():
        return
    try:
        tokenizer = source.text_tokenizer()
    except CompileAheadError as err:  # the run's outputs are not lost to its tokenizer
        print(f"compile-ahead: the report holds no text: {err}", file=sys.stderr)
        return
    result.report.texts = [tokenizer.decode(ids) for ids in generated]


def import_runtime() -> None:
    """Import what a run executes (OpenVINO among it), which building the parser leaves
    unloaded; `ab` checks with this that its `run` trials can load. A signal meanwhile is
    acted on after the imports, as during the parser's (numpy turns one into an ImportError)."""
    with deferred():
        import compile_ahead.runtime.ladder.reporting.events
        import compile_ahead.runtime.ladder.reporting.progress
        import compile_ahead.runtime.ladder.runner  # noqa: F401


def write_report(path: Path | None, result: RunResult) -> Path | None:
    """The report of a failed or interrupted run goes beside the requested path, never over it."""
    if path is None:
        return None
    return write_json_atomic(path, result.report.to_json(), destination(path, result.completed))


def run(args: argparse.Namespace) -> int:
    import_runtime()  # before the clock starts: startup_s leaves the imports out, as it did
    args.started_ns = now_ns()  # first_token_s counts from the command's start
    check_run_outputs(args)
    if args.open and args.trace is None:
        raise CompileAheadError("--open opens the trace: give --trace FILE too")
    options = compile_options(args)  # a refused device or property opens no output
    config = run_config_from_args(args, args.schedule, options)  # before the model is opened
    trace_error: CompileAheadError | None = None
    # Once the run is over (execute holds) its outputs (trace, summary, report) are written
    # whole: a signal meanwhile takes effect after them (release).
    if args.trace is None:
        result = execute(args, config)[0]
    else:
        # Profiling sits above the runtime: imported only when a trace is asked for.
        from compile_ahead.profiling.traces.ladder_run import traced

        with traced(args.trace, args.device, args.steps_per_slice) as events:
            result = execute(args, config, events)[0]
            events.failed = not result.completed
        trace_error = events.trace_error
    # The summary first: a failed write must not hide what ran.
    print(result.report.summary())
    try:
        written = write_report(args.report, result)
    except CompileAheadError as err:
        if trace_error is None:
            raise
        raise CompileAheadError(f"{err}; and {trace_error}") from None
    if written is not None:
        print(f"report: {written}")
    if trace_error is not None:
        raise trace_error
    if result.report.interrupted or interrupted():  # also while its cache entries were written
        return INTERRUPTED_EXIT
    if result.error is not None:
        raise result.error  # CompileAheadError prints as one line; anything else is a bug
    release()  # the trace is opened as any command runs: Ctrl-C stops it
    if args.open:
        from compile_ahead.profiling.perfetto.ui import open_trace

        open_trace(args.trace)
    return 0


def decode_steps_expected(settled: SettledRun) -> int:
    """The decode steps a run takes at most (the progress bar's total): after a prefill
    graph, the largest token limit; token by token, from the shortest prompt's end to the
    longest sequence's last token."""
    sequences = settled.sequences
    if settled.prefill.uses_graph:
        return max(s.decode_tokens for s in sequences)
    shortest = min(len(s.prompt) for s in sequences)
    return max(len(s.prompt) + s.decode_tokens for s in sequences) - shortest
