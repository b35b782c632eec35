"""`compile-ahead run`: one schedule on the ladder, a progress bar and a JSON run report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from compile_ahead.atomic import write_json_atomic
from compile_ahead.errors import CompileAheadError

from .cli_generate import add_model_options, compile_options
from .compile_jobs import Faults
from .events import FanOut, RunEvents
from .ladder import NAMED_LADDERS, Ladder
from .ladder_runner import GRAPH_MODES, RunResult, RunSettings, default_graph, run_ladder
from .progress import ProgressBar
from .protocol import DEFAULT_PROMPT_LEN, greedy, teacher_forced
from .schedules import SCHEDULES, get_schedule
from .sources import ModelSource, resolve_model
from .tokenizer import load_tokenizer, parse_token_ids


def add_ladder_options(p: argparse.ArgumentParser) -> None:
    """Ladder, protocol and fault flags shared by `run`, `profile-compile` and `ab schedule`."""
    p.add_argument(
        "--ladder",
        default="default",
        help=f"rung capacities, e.g. 1024,2048,4096,8192, or one of "
        f"{', '.join(NAMED_LADDERS)} (default: default)",
    )
    p.add_argument(
        "--prompt-len",
        type=int,
        default=DEFAULT_PROMPT_LEN,
        help="teacher-forced protocol: prompt tokens (default 128)",
    )
    p.add_argument(
        "--decode-tokens",
        type=int,
        default=None,
        help="decode steps (default: up to the top rung's capacity)",
    )
    p.add_argument(
        "--prompt-ids",
        default=None,
        help="greedy mode: generate from these comma-separated token ids",
    )
    p.add_argument("--prompt", default=None, help="greedy mode: generate from this text")
    p.add_argument(
        "--prefill-chunk",
        type=int,
        default=1,
        help="tokens per prefill call; 1 (default) prefills on the first decode graph, larger "
        "values compile a prefill graph in the foreground",
    )
    p.add_argument(
        "--boundary-window",
        type=int,
        default=3,
        help="decode steps recorded on each side of a boundary (default 3)",
    )
    p.add_argument(
        "--graph",
        choices=GRAPH_MODES,
        default=None,
        help="whole: one graph per rung, each with its own compiled weights; split: weight "
        "parts compiled once, a rung is only its attention core (default: chosen per device "
        "from measurement, whole on CPU; see README)",
    )
    faults = p.add_argument_group("fault injection (tests and benchmarks)")
    faults.add_argument(
        "--inject-compile-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="add this much to every background compile",
    )
    faults.add_argument(
        "--inject-compile-failure",
        action="append",
        default=[],
        metavar="CAPACITY[:COUNT]",
        help="make the compile of this rung fail COUNT times (default 1)",
    )
    faults.add_argument(
        "--step-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="emulate a slower device: add this much to every decode step",
    )


def parse_faults(args: argparse.Namespace) -> Faults:
    fail: dict[int, int] = {}
    for item in args.inject_compile_failure:
        cap, _, count = item.partition(":")
        try:
            fail[int(cap)] = int(count or 1)
        except ValueError:
            raise CompileAheadError(
                f"--inject-compile-failure takes CAPACITY[:COUNT], got {item!r}"
            ) from None
    if args.inject_compile_delay < 0 or args.step_delay < 0:
        raise CompileAheadError("injected delays must be >= 0")
    return Faults(args.inject_compile_delay, fail, args.step_delay)


def settings_from_args(args: argparse.Namespace, source: ModelSource, schedule: str) -> RunSettings:
    ladder = Ladder.parse(args.ladder)
    if args.prompt_ids is not None or args.prompt is not None:
        if args.prompt is not None:
            prompt = load_tokenizer(source.model_dir, source.name).encode(args.prompt).ids
        else:
            prompt = parse_token_ids(args.prompt_ids, source.config.vocab_size)
        tokens = args.decode_tokens or ladder.top - len(prompt)
        protocol = greedy(prompt, tokens)
    else:
        if args.prompt_len <= 0:
            raise CompileAheadError("--prompt-len must be positive")
        if args.prompt_len >= ladder.top:
            raise CompileAheadError(
                f"--prompt-len {args.prompt_len} leaves no room to decode below the top rung "
                f"({ladder.top})"
            )
        tokens = (
            args.decode_tokens if args.decode_tokens is not None else ladder.top - args.prompt_len
        )
        protocol = teacher_forced(source.config.vocab_size, args.prompt_len, tokens)
    if args.boundary_window < 0:
        raise CompileAheadError("--boundary-window must be >= 0")
    return RunSettings(
        get_schedule(schedule),
        ladder,
        protocol,
        prefill_chunk=args.prefill_chunk,
        boundary_window=args.boundary_window,
        faults=parse_faults(args),
        graph=args.graph or default_graph(args.device),
    )


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="run one schedule on the capacity ladder")
    add_model_options(p)
    p.add_argument(
        "--schedule",
        default="i2",
        choices=sorted(SCHEDULES),
        help="b0 direct, b1 shared-max pyramid, i1 copy-and-grow, i2 one-ahead JIT, "
        "i3 reserve-and-commit (default i2)",
    )
    add_ladder_options(p)
    p.add_argument("--report", type=Path, default=None, help="write the JSON run report here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="also write a Perfetto trace of the run here (open in ui.perfetto.dev)",
    )
    p.add_argument(
        "--steps-per-slice",
        type=int,
        default=1,
        help="with --trace: one decode slice per N steps (keeps long traces small)",
    )
    p.set_defaults(func=run)


def summarize(report: dict[str, Any]) -> str:
    kind = "SYNTHETIC weights" if report["synthetic"] else "real weights"
    lines = [
        f"model {report['model']} [{kind}] on {report['device']}",
        f"schedule {report['schedule']} ({report['schedule_title']}), ladder {report['ladder']}, "
        f"{report['graph']} graphs",
        f"stop: {report['stop_reason']} after {report['tokens_decoded']} decode tokens",
        f"foreground compile {report['foreground_compile_s']:.2f} s, background compile "
        f"{report['background_compile_s']:.2f} s, critical path {report['critical_path_s']:.2f} s,"
        f" decode {report['decode_s']:.2f} s",
    ]
    for r in report["rungs"]:
        rate = f"{r['tok_s']:.2f} tok/s" if r["tok_s"] else "-"
        lines.append(f"  rung {r['capacity']:>6}: {r['tokens']:>6} tokens, {rate}")
    for b in report["boundaries"]:
        if "retry_error" in b:
            lines.append(f"  boundary {b['from']}->{b['to']}: FAILED ({b['retry_error']})")
            continue
        margin = b["ready_margin_s"]
        lines.append(
            f"  boundary {b['from']}->{b['to']}: compile {b['compile_s']:.2f} s, "
            f"margin {'-' if margin is None else f'{margin:.2f} s'}, wait {b['wait_s']:.3f} s, "
            f"migration {b['migration_s'] * 1e3:.1f} ms, {b['bytes_copied']} B copied"
        )
    mib = 2**20
    lines.append(
        f"KV reserved avg {report['kv_reserved_avg_bytes'] / mib:.1f} MiB "
        f"(peak {report['kv_reserved_peak_bytes'] / mib:.1f}), committed avg "
        f"{report['kv_committed_avg_bytes'] / mib:.1f} MiB; graphs resident max "
        f"{report['graphs_resident_max']}; peak RSS {report['peak_rss_bytes'] / mib:.0f} MiB"
    )
    return "\n".join(lines)


def execute(
    args: argparse.Namespace, schedule: str, events: RunEvents | None = None, quiet: bool = False
) -> RunResult:
    """Resolve, run and report; the report is written even when the run fails."""
    source = resolve_model(args.model)
    options = compile_options(args)
    settings = settings_from_args(args, source, schedule)
    if not quiet:
        print(f"model: {source.label}", file=sys.stderr)
    bar = ProgressBar(settings.protocol.decode_tokens, enabled=not quiet and not args.no_progress)
    try:
        result = run_ladder(source, options, settings, FanOut(bar, events) if events else bar)
    finally:
        bar.close()
    if args.report is not None:
        write_json_atomic(args.report, result.report)
    return result


def run(args: argparse.Namespace) -> int:
    if args.trace is None:
        result = execute(args, args.schedule)
    else:
        # Profiling sits above the runtime: imported only when a trace is asked for.
        from compile_ahead.profiling.run_trace import traced

        if args.steps_per_slice < 1:
            raise CompileAheadError("--steps-per-slice must be >= 1")
        with traced(args.trace, args.device, args.steps_per_slice) as events:
            result = execute(args, args.schedule, events)
    print(summarize(result.report))
    if args.report is not None:
        print(f"report: {args.report}")
    if result.report["stop_reason"] == "interrupted":
        return 130
    if result.error is not None:
        raise result.error  # CompileAheadError prints as one line; anything else is a bug
    return 0
