"""`compile-ahead ab compile|schedule|baselines|serve`: paired, counterbalanced A/B trials.

The experiments' engine and analysis (numpy among what they load) are imported by the
functions that run them, not here: building the command-line parser must stay light.
"""

from __future__ import annotations

import argparse
import functools
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from compile_ahead.commands import ab_options, ab_serve
from compile_ahead.commands.flag_table import parser_flags, subcommand
from compile_ahead.commands.options import (
    add_graph_option,
    add_ladder_option,
    add_model_options,
    add_ov_config_options,
    add_placement_options,
    add_prefill_options,
    add_protocol_options,
    add_synthetic_dtype_option,
    compile_options,
    count,
    ladder_choice,
    model_inputs,
    ov_config_from_args,
    run_config_from_args,
    seconds,
)
from compile_ahead.commands.parsers import ExactParser
from compile_ahead.errors import CompileAheadError
from compile_ahead.output.checks import check_new_dir, check_not_inputs, mark_output_dir
from compile_ahead.profiling.campaigns.definition.validation.ab_flags import AbFlag
from compile_ahead.profiling.results_format.experiment import load_experiment
from compile_ahead.profiling.results_format.records import load_records
from compile_ahead.profiling.trials.arms import check_arm_properties, parse_arm
from compile_ahead.profiling.trials.pooling import pool_experiments
from compile_ahead.profiling.trials.runner import DEFAULT_TRIAL_TIMEOUT_S
from compile_ahead.profiling.trials.schedule_kind import batch as schedule_batch
from compile_ahead.profiling.trials.schedule_kind.baselines import BASELINES
from compile_ahead.profiling.trials.schedule_kind.template import TEMPLATE_KEYS
from compile_ahead.runtime.ladder.settings.batch_bound import check_batch_size
from compile_ahead.runtime.ladder.settings.capacities import Ladder

if TYPE_CHECKING:
    from compile_ahead.profiling.trials.schedule_kind.run import ScheduleTrials
    from compile_ahead.runtime.ladder.settings.config import RunConfig


def _common(p: argparse.ArgumentParser, pairs: int) -> None:
    p.add_argument(
        "--pairs",
        type=count(1),
        default=pairs,
        help=f"measured blocks, each running every arm once (default {pairs})",
    )
    p.add_argument(
        "--warmup",
        type=count(0),
        default=1,
        help="unmeasured trials per arm before the blocks (default 1)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results directory (default ab-results/KIND-TIMESTAMP)",
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        default=DEFAULT_TRIAL_TIMEOUT_S,
        help=f"seconds allowed per trial (and per arm probe), then it counts as hung "
        f"(default {DEFAULT_TRIAL_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--first-block",
        type=count(0),
        default=0,
        help="start at this block of the design's order (default 0; a campaign runs each block "
        "of a cell as its own run)",
    )
    p.add_argument("--no-plot", action="store_true", help="skip the PNG of paired differences")
    p.add_argument("--quiet", action="store_true", help="no per-trial progress lines")


def _schedule_options(s: argparse.ArgumentParser, default_arms: str | None) -> None:
    add_model_options(s, required=True, cache=False)
    s.add_argument(
        "--arms",
        required=default_arms is None,
        default=default_arms,
        help="schedules, comma-separated, e.g. i1,i2; the first is the control",
    )
    add_synthetic_dtype_option(s)
    add_ladder_option(s, auto=False)
    add_protocol_options(s, per_sequence=True)
    s.add_argument(
        "--batch",
        type=int,
        default=None,
        metavar="B",
        help="B sequences per trial (`compile-ahead run --batch B`), each with the prompt "
        "--prompt-len gives (one length for all, or one per sequence) (default 1)",
    )
    s.add_argument(
        "--prompt-spread",
        type=float,
        default=0.0,
        metavar="F",
        help="at --batch B > 1, ragged prompts: the B lengths evenly spread over --prompt-len "
        "+- F of it (e.g. 0.25; default 0: every sequence the same length)",
    )
    add_prefill_options(s)
    add_graph_option(s)
    add_placement_options(s)
    add_ov_config_options(s)
    s.add_argument(
        "--command",
        default=None,
        help="trial command template instead of `compile-ahead run`; placeholders "
        + ", ".join("{" + k + "}" for k in TEMPLATE_KEYS),
    )
    _common(s, pairs=5)


def register(subparsers: argparse._SubParsersAction) -> None:
    ab = subparsers.add_parser(
        "ab",
        help="paired, counterbalanced A/B trials (compile time, schedules, serving policies)",
        description="Paired A/B trials: each trial a fresh process, AB/BA or Williams order, "
        "paired-t 95% CIs and exact sign-flip p-values.",
    )
    kinds = ab.add_subparsers(dest="ab_kind", required=True, metavar="KIND")
    _register_compile(kinds)
    s = kinds.add_parser(
        "schedule",
        help="the seed's replicated schedule experiment (e.g. i1 vs i2)",
        description="Each trial runs `compile-ahead run --schedule S` in a fresh process; the "
        "first schedule is the control.",
    )
    _schedule_options(s, default_arms=None)
    s.set_defaults(func=run_schedule_ab)
    b = kinds.add_parser(
        "baselines",
        help="OpenVINO's NPU LLM pipeline (pyramid off/on) and openvino-genai beside our schedules",
        description="Upstream B0 (NPUW, pyramid off) and B1 (pyramid on) on CPU, on the same "
        "weights, in the same table as our schedules: a schedule A/B whose arms include b0/b1.",
    )
    _schedule_options(b, default_arms="npuw-b1,npuw-b0,genai,i2,i3")
    b.set_defaults(func=run_baselines)
    ab_serve.register(kinds, _common)
    _register_report(kinds)


def _register_compile(kinds: argparse._SubParsersAction) -> None:
    """`ab compile` and `ab calibrate`."""
    c = kinds.add_parser(
        "compile",
        help="full compile wall per rung, OpenVINO installation vs installation",
        description="Compare OpenVINO installations or configurations on the compile wall of "
        "each ladder rung. ARM SPEC: an interpreter, a venv, a library dir holding an openvino "
        "package, or 'current'; plus KEY=VALUE compile properties, config=FILE.json (a "
        "properties file, as --ov-config-file) and env.VAR=VALUE, comma-separated. The first "
        "arm is the control.",
    )
    c.add_argument(
        "--arm",
        action="append",
        required=True,
        metavar="NAME=SPEC",
        help="e.g. A=/tmp/ov-a/bin/python; give two or more (or one with --aa)",
    )
    c.add_argument(
        "--aa",
        action="store_true",
        help="also run the control again as the second arm (an A/A comparison in the same "
        "design: the noise floor of every endpoint); with one --arm, an A/A experiment",
    )
    ab_options.add_compile_options(c)
    _common(c, pairs=3)
    c.set_defaults(func=run_compile_ab)
    cal = kinds.add_parser(
        "calibrate",
        help="what `ab compile` can detect here: the control against itself plus known CPU work",
        description="Measure the control's compile CPU time in calibration trials, then run an "
        "experiment of the control against the control plus a CPU spin of --delta percent of "
        "it on the compiling thread (labelled CALIBRATION everywhere); --aa adds the control "
        "again. Reports per endpoint the noise, the A/A outcome, the spin's effect and the MDE.",
    )
    ab_options.add_calibrate_options(cal)
    _common(cal, pairs=10)
    cal.set_defaults(func=run_calibrate)


def _register_report(kinds: argparse._SubParsersAction) -> None:
    """`ab report`."""
    r = kinds.add_parser(
        "report",
        help="re-analyse a results directory (trials.jsonl + experiment.json)",
        description="Rebuild the table, JSON and plot of an `ab` run from its directory, e.g. "
        "after a failed or interrupted run (complete pairs only; marked PARTIAL).",
    )
    r.add_argument(
        "directory",
        type=Path,
        nargs="+",
        help="one results directory, or several runs of one experiment to pool (with --out)",
    )
    r.add_argument(
        "--out",
        type=Path,
        help="with several directories: a new directory for the pooled experiment and its report",
    )
    r.add_argument("--no-plot", action="store_true")
    r.set_defaults(func=run_report)


def _out_dir(args: argparse.Namespace, kind: str) -> Path:
    """The results directory, checked before any work: a new (or empty) one per experiment,
    so no experiment's files overwrite or mix with another's."""
    out = args.out
    if out is None:
        out = Path("ab-results") / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    check_new_dir(out, "--out")
    check_not_inputs({"--out": out}, model_inputs(args))
    return out


def run_compile_ab(args: argparse.Namespace) -> int:
    from compile_ahead.profiling.trials.compile_kind import run as compile_run

    specs = [parse_arm(text, args.device) for text in args.arm]
    arms_plan = compile_run.with_aa(specs, args.aa)
    run = ab_options.compile_run_from_args(args)
    return compile_run.run_compile_experiment(run, lambda: _out_dir(args, "compile"), arms_plan)


def run_calibrate(args: argparse.Namespace) -> int:
    from compile_ahead.profiling.trials.compile_kind import run as compile_run

    cal = ab_options.calibration_from_args(args)
    run = ab_options.compile_run_from_args(args)
    return compile_run.run_calibrate(run, cal, lambda: _out_dir(args, "calibrate"))


def run_schedule_ab(args: argparse.Namespace) -> int:
    from compile_ahead.profiling.trials.schedule_kind import arms as schedule_arms
    from compile_ahead.profiling.trials.schedule_kind import run as schedule_run

    schedules = schedule_arms.parse_arms(args.arms, custom_command=args.command is not None)
    out = _out_dir(args, "schedule")
    trials = _schedule_trials(args, schedules)
    if args.command is None and len(trials.upstream) < len(schedules):
        check_run_available()
    design = ab_options.design_from_args(args)
    return schedule_run.run_schedule_experiment(trials, design, out)


def _schedule_trials(args: argparse.Namespace, schedules: tuple[str, ...]) -> ScheduleTrials:
    """The trials' ladder, batch, prompt and decode lengths, and the flags each `compile-ahead
    run` trial gets: the run configuration checked once here (not in every trial), its device
    defaults resolved here so every trial gets the same. A --command template says its own
    flags (its trials need not run this OpenVINO)."""
    from compile_ahead.profiling.trials.schedule_kind.run import ScheduleTrials
    from compile_ahead.runtime.ladder.settings.config import Prompt, RunConfig

    upstream = [a for a in schedules if a in BASELINES]
    if upstream and (args.ov_config or args.ov_config_file):
        raise CompileAheadError(
            f"--ov-config applies to compile-ahead's runs; the upstream arm(s) "
            f"{', '.join(upstream)} compile with their pipeline's own properties"
        )
    ladder = _fixed_ladder(args)
    batch, lengths = _batch(args, schedules, ladder)
    if args.command is None:  # the run configuration of every trial: its B prompts
        prompts = tuple(Prompt(n) for n in lengths)
        config = run_config_from_args(args, None, compile_options(args), prompts=prompts)
        passed = _run_flags(args, config)
    else:
        config = RunConfig(None, ladder, (Prompt(lengths[0]),), args.decode_tokens)
        ov_config_from_args(args, check=True)
        passed = ()
    decode_tokens = _lengths(lengths, config.decode_tokens, ladder)
    dtype = args.synthetic_dtype
    model_flags = () if dtype is None else ("--synthetic-dtype", dtype)
    return ScheduleTrials(
        schedules, args.model, ladder, _center(args.prompt_len, lengths), decode_tokens,
        args.command, passed, model_flags, batch, lengths if batch > 1 else (),
    )  # fmt: skip


def _batch(
    args: argparse.Namespace, schedules: tuple[str, ...], ladder: Ladder
) -> tuple[int, tuple[int, ...]]:
    """B and each sequence's prompt length (schedule_kind/batch.py), the arms checked to
    decode B sequences."""
    from compile_ahead.runtime.ladder.settings.config import default_prompt_len

    if args.batch is not None:
        check_batch_size(args.batch)  # before B lengths are made
    batch, lengths = schedule_batch.batch_and_lengths(
        args.batch, args.prompt_len, default_prompt_len(ladder), args.prompt_spread
    )
    schedule_batch.check_batch_arms(schedules, batch)
    return batch, lengths


def _center(given: int | tuple[int, ...] | None, lengths: tuple[int, ...]) -> int:
    """The experiment's prompt length: the one given (ragged lengths spread around it), else
    the mean of the lengths."""
    return given if isinstance(given, int) else round(sum(lengths) / len(lengths))


def _fixed_ladder(args: argparse.Namespace) -> Ladder:
    """--ladder as `ab` takes it: rungs or a named ladder, never auto."""
    ladder = ladder_choice(args)
    assert isinstance(ladder, Ladder)  # ab has no auto ladder
    return ladder


def _run_flags(args: argparse.Namespace, config: RunConfig) -> tuple[str, ...]:
    """What each `compile-ahead run` trial is told besides its schedule, model and lengths."""
    # Trials compile for real: a compile cache would turn later trials' compiles into imports.
    passed = ["--device", args.device, "--graph", str(config.graph), "--no-cache"]
    passed += ["--compile-placement", str(config.placement)]
    passed += ["--compile-timeout", str(config.compile_timeout_s)]
    for flag, value in (
        ("--inference-precision", args.inference_precision),
        ("--kv-precision", args.kv_precision),
        ("--prefill-chunk", args.prefill_chunk),
        ("--prefill-shape", args.prefill_shape),
        ("--decode-compile", args.decode_compile),
        ("--ov-config-file", args.ov_config_file),
    ):
        if value is not None:
            passed += [flag, str(value)]
    for prop in args.ov_config:
        passed += ["--ov-config", prop]
    return tuple(passed)


def _lengths(lengths: tuple[int, ...], decode_tokens: int | None, ladder: Ladder) -> int:
    """The trials' decode length (default: up to the top rung from the longest prompt): every
    trial decodes them all, every sequence below the top."""
    from compile_ahead.runtime.ladder.settings.config import check_prompt_fits

    for length in lengths:
        check_prompt_fits(length, ladder)
    longest = max(lengths)
    tokens = decode_tokens if decode_tokens is not None else ladder.top - longest
    if tokens <= 0:
        raise CompileAheadError(f"--decode-tokens must be positive, got {tokens}")
    if longest + tokens > ladder.top:
        what = f"--prompt-len {longest}" if len(lengths) == 1 else f"the longest prompt {longest}"
        raise CompileAheadError(
            f"{what} + --decode-tokens {tokens} exceeds the top rung {ladder.top}"
        )
    return tokens


class _Refusing(ExactParser):
    """`ab`'s parser with its errors raised instead of printed and exited on."""

    def error(self, message: str) -> NoReturn:
        raise CompileAheadError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise CompileAheadError((message or "the parser stopped").strip())


def ab_parser() -> argparse.ArgumentParser:
    """The `ab` command's own parser, refusing (CompileAheadError) instead of exiting."""
    top = _Refusing(prog="compile-ahead", add_help=False)
    register(top.add_subparsers(dest="command"))
    return top


# Compile properties already checked against a device: (interpreter, library, env, properties,
# device). A campaign's cells repeat their arms, and asking another interpreter takes seconds.
_CHECKED_PROPERTIES: set[tuple] = set()


def _check_arm_properties(text: str, device: str) -> None:
    """The arm's compile properties against the device of the OpenVINO the arm runs."""
    spec = parse_arm(text, device)
    key = (spec.python, spec.library_path, tuple(sorted(spec.env.items())),
           tuple(sorted(spec.config.items())), device)  # fmt: skip
    if key not in _CHECKED_PROPERTIES:
        check_arm_properties(spec, device)
        _CHECKED_PROPERTIES.add(key)


@functools.cache
def _cell_parser() -> argparse.ArgumentParser:
    """One `ab` parser for every cell checked in this process: building it is most of what a
    cell's check costs, and parsing leaves it unchanged."""
    return ab_parser()


class CellChecks:
    """The `ab` command's checks of a campaign's cells (profiling/campaigns/definition/spec.py,
    CheckCell): a cell's command line, and the long flags of `ab KIND` an ``[options]`` key
    may name, read from this parser."""

    def __call__(self, argv: list[str]) -> None:
        _check_cell_argv(argv)

    def flags(self, kind: str) -> dict[str, AbFlag]:
        return _kind_flags(kind)


check_cell = CellChecks()  # what `campaign` checks a spec's cells with


@functools.cache
def _kind_flags(kind: str) -> dict[str, AbFlag]:
    return parser_flags(subcommand(subcommand(_cell_parser(), "ab"), kind))


def _check_cell_argv(argv: list[str]) -> None:
    """An `ab KIND ...` command line (a campaign's cell) as `ab` checks it before any model or
    trial: its flags, arms and ladder, and its compile properties against the device (as
    `ab` checks them before it writes anything); CompileAheadError (one line) otherwise."""
    from compile_ahead.profiling.trials.compile_kind.exported_rungs import parse_ladder
    from compile_ahead.profiling.trials.schedule_kind import arms as schedule_arms

    args = _cell_parser().parse_args(argv)
    if args.ab_kind == "compile":
        for text in args.arm:
            parse_arm(text, args.device)
        parse_ladder(args.ladder)
        for text in args.arm:
            _check_arm_properties(text, args.device)
        return
    schedules = schedule_arms.parse_arms(args.arms, custom_command=args.command is not None)
    # The run configuration every trial gets, checked as `ab` checks it: RunConfig.validate,
    # the device's answer to a batch of B included.
    _schedule_trials(args, schedules)


def check_run_available() -> None:
    """Fail early, in one line, if `compile-ahead run` (what the trials run) cannot load."""
    try:
        from compile_ahead.commands import run

        run.register(ExactParser().add_subparsers())
        run.import_runtime()
    except ImportError as err:
        raise CompileAheadError(f"the compile-ahead CLI cannot load: {err}") from err


def run_baselines(args: argparse.Namespace) -> int:
    return run_schedule_ab(args)


def run_report(args: argparse.Namespace) -> int:
    """Re-analyse a results directory (e.g. after a failed or interrupted run), or pool
    several runs of one experiment into a new one (--out)."""
    from compile_ahead.profiling.trials.experiment import (
        completion_status,
        report_experiment,
        save_experiment,
    )
    from compile_ahead.profiling.trials.kinds import KINDS

    dirs: list[Path] = args.directory
    if len(dirs) == 1 and args.out is None:
        out = dirs[0]
        exp, records = load_experiment(out, KINDS), load_records(out)
    else:
        if args.out is None:
            raise CompileAheadError("ab report: pooling several directories needs --out DIR")
        out = args.out
        check_new_dir(out, "--out")
        check_not_inputs({"--out": out}, dirs)
        exp, records = pool_experiments(
            dirs, [load_experiment(d, KINDS) for d in dirs], [load_records(d) for d in dirs]
        )
        mark_output_dir(out)
        save_experiment(out, exp, records)
    status = completion_status(exp, records)
    report_experiment(out, exp, records, KINDS, no_plot=args.no_plot, status=status)
    return 0
