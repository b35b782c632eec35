"""`compile-ahead ab compile|schedule|baselines`: paired, counterbalanced A/B trials."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.outputs import check_new_dir, mark_output_dir
from compile_ahead.profiling.trials import compile_run, schedule_ab
from compile_ahead.profiling.trials.arms import parse_arm
from compile_ahead.profiling.trials.design import make_plan
from compile_ahead.profiling.trials.experiment import (
    completion_status,
    load_experiment,
    report_experiment,
    run_experiment,
    save_experiment,
)
from compile_ahead.profiling.trials.pooling import pool_experiments
from compile_ahead.profiling.trials.runner import (
    DEFAULT_TRIAL_TIMEOUT_S,
    load_records,
    trial_timeout,
)
from compile_ahead.runtime.cli.options import (
    add_graph_option,
    add_ladder_option,
    add_model_options,
    add_ov_config_options,
    add_placement_options,
    add_prefill_options,
    add_protocol_options,
    add_synthetic_dtype_option,
    check_device,
    check_prefill_args,
    compile_timeout,
    decode_tokens_from_args,
    graph_mode,
    ladder_from_args,
    ov_config_from_args,
    placement_mode,
    prompt_len_from_args,
)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from err
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from err
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _common(p: argparse.ArgumentParser, pairs: int) -> None:
    p.add_argument(
        "--pairs",
        type=_positive,
        default=pairs,
        help=f"measured blocks, each running every arm once (default {pairs})",
    )
    p.add_argument(
        "--warmup",
        type=_non_negative,
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
        type=trial_timeout,
        default=DEFAULT_TRIAL_TIMEOUT_S,
        help=f"seconds allowed per trial (and per arm probe), then it counts as hung "
        f"(default {DEFAULT_TRIAL_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--first-block",
        type=_non_negative,
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
    add_protocol_options(s)
    add_prefill_options(s)
    add_graph_option(s)
    add_placement_options(s)
    add_ov_config_options(s)
    s.add_argument(
        "--command",
        default=None,
        help="trial command template instead of `compile-ahead run`; placeholders "
        + ", ".join("{" + k + "}" for k in schedule_ab.TEMPLATE_KEYS),
    )
    _common(s, pairs=5)


def register(subparsers: argparse._SubParsersAction) -> None:
    ab = subparsers.add_parser(
        "ab",
        help="paired, counterbalanced A/B trials (compile time, schedules)",
        description="Paired A/B trials: each trial a fresh process, AB/BA or Williams order, "
        "paired-t 95% CIs and exact sign-flip p-values.",
    )
    kinds = ab.add_subparsers(dest="ab_kind", required=True, metavar="KIND")

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
    compile_run.add_compile_options(c)
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
    compile_run.add_calibrate_options(cal)
    _common(cal, pairs=10)
    cal.set_defaults(func=run_calibrate)

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
    return out


def run_compile_ab(args: argparse.Namespace) -> int:
    specs = [parse_arm(text, args.device) for text in args.arm]
    arms_plan = compile_run.with_aa(specs, args.aa)
    return compile_run.run_compile_experiment(args, lambda: _out_dir(args, "compile"), arms_plan)


def run_calibrate(args: argparse.Namespace) -> int:
    return compile_run.run_calibrate(args, lambda: _out_dir(args, "calibrate"))


def run_schedule_ab(args: argparse.Namespace) -> int:
    schedules = schedule_ab.parse_arms(args.arms, custom_command=args.command is not None)
    out = _out_dir(args, "schedule")
    ladder = ladder_from_args(args)
    prompt_len = prompt_len_from_args(args, ladder)
    decode_tokens = decode_tokens_from_args(args, ladder, prompt_len)
    if prompt_len + decode_tokens > ladder.top:
        raise CompileAheadError(
            f"--prompt-len {prompt_len} + --decode-tokens {decode_tokens} exceeds the top "
            f"rung {ladder.top}"
        )
    from compile_ahead.profiling.trials import baselines

    if any(a in baselines.BASELINES for a in schedules):
        baselines.require_upstream()
    if args.command is None and any(a not in baselines.BASELINES for a in schedules):
        schedule_ab.check_run_available()
    plan = make_plan(schedules, args.pairs, args.warmup, args.first_block)
    # Our runs get the same device, precisions and graph mode (resolved here, once); a
    # --command template says its own.
    # Trials compile for real: a compile cache would turn later trials' compiles into imports.
    passed = ["--device", args.device, "--graph", graph_mode(args), "--no-cache"]
    passed += ["--compile-placement", placement_mode(args)]
    passed += ["--compile-timeout", str(compile_timeout(args))]
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
    upstream = [a for a in schedules if a in baselines.BASELINES]
    if upstream and (args.ov_config or args.ov_config_file):
        raise CompileAheadError(
            f"--ov-config applies to compile-ahead's runs; the upstream arm(s) "
            f"{', '.join(upstream)} compile with their pipeline's own properties"
        )
    if args.command is None:  # the trials run this OpenVINO: refused here, not in every trial
        check_device(args.device)
        check_prefill_args(args)
    ov_config_from_args(args, check=True)  # refused here, not in every trial
    if args.command is not None:
        passed = []
    model_flags = (
        [] if args.synthetic_dtype is None else ["--synthetic-dtype", args.synthetic_dtype]
    )
    arms = schedule_ab.make_arms(
        schedules,
        args.model,
        str(ladder),
        prompt_len,
        decode_tokens,
        args.command,
        passed,
        model_flags,
    )
    mark_output_dir(out)
    exp = {
        "kind": "schedule", "arms": [a.describe() for a in arms], "pairs": args.pairs,
        "warmup": args.warmup, "ladder": list(ladder.rungs), "model": args.model,
        "prompt_len": prompt_len, "decode_tokens": decode_tokens, "invocation": args.invocation,
        "first_block": args.first_block,
    }  # fmt: skip
    records = run_experiment(plan, arms, out, exp, args.timeout, args.quiet)
    report_experiment(out, exp, records, no_plot=args.no_plot)
    return 0


def run_baselines(args: argparse.Namespace) -> int:
    return run_schedule_ab(args)


def run_report(args: argparse.Namespace) -> int:
    """Re-analyse a results directory (e.g. after a failed or interrupted run), or pool
    several runs of one experiment into a new one (--out)."""
    dirs: list[Path] = args.directory
    if len(dirs) == 1 and args.out is None:
        out = dirs[0]
        exp, records = load_experiment(out), load_records(out)
    else:
        if args.out is None:
            raise CompileAheadError("ab report: pooling several directories needs --out DIR")
        out = args.out
        check_new_dir(out, "--out")
        exp, records = pool_experiments(
            dirs, [load_experiment(d) for d in dirs], [load_records(d) for d in dirs]
        )
        mark_output_dir(out)
        save_experiment(out, exp, records)
    report_experiment(
        out, exp, records, no_plot=args.no_plot, status=completion_status(exp, records)
    )
    return 0
