"""The flags of `ab compile` and `ab calibrate`: what they compile and how each trial measures
it, and the typed configurations built from them once (profiling/trials/compile_kind/run.py
runs them). What the configurations are made of is imported where they are made: building the
parser loads none of the trials' engine."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from compile_ahead.commands.options import add_ladder_option, add_synthetic_dtype_option, count
from compile_ahead.profiling.trials.compile_kind.trial_values import (
    DEFAULT_REPEAT,
    STATISTICS,
    TIME_STATISTIC_DEFAULT,
)
from compile_ahead.profiling.trials.run_options import DesignOptions

if TYPE_CHECKING:
    from compile_ahead.profiling.trials.compile_kind.exported_rungs import MeasureOptions
    from compile_ahead.profiling.trials.compile_kind.run import Calibration, CompileRun


def _cpu_range(part: str, text: str) -> tuple[int, int]:
    """One item of a ``--pin`` list (``3`` or ``0-3``) as its first and last CPU."""
    low, dash, high = part.strip().partition("-")
    try:
        first = int(low)
        return first, int(high) if dash else first
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected CPUs like 0,1 or 0-3, got {text!r}") from None


def cpu_list(text: str) -> tuple[int, ...]:
    """``--pin`` as an argparse type: CPUs like 0,1 or 0-3, each one this process may use."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, high = _cpu_range(part, text)
        if high < low:
            raise argparse.ArgumentTypeError(
                f"{text}: the range {part.strip()} is reversed (write {high}-{low})"
            )
        cpus.update(range(low, high + 1))
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise argparse.ArgumentTypeError(
            f"{text}: this process may run on CPUs {','.join(map(str, sorted(allowed)))} only"
        )
    return tuple(sorted(cpus))


def add_measure_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--repeat", type=count(1), default=DEFAULT_REPEAT,
        help="compile each rung K times in each trial's process and use the --statistic of "
        f"the K values (default {DEFAULT_REPEAT}: on a 2-vCPU VM it made a 1%% compile change "
        "visible in 10 pairs; 1 for compiles that take minutes)",
    )  # fmt: skip
    p.add_argument(
        "--compile-warmup", type=count(0), default=None,
        help="compiles per rung before the --repeat ones, recorded and not used (default 1 "
        "with --repeat above 1: a process's first compile pays one-time costs; else 0)",
    )  # fmt: skip
    p.add_argument(
        "--statistic", choices=sorted(STATISTICS), default=TIME_STATISTIC_DEFAULT,
        help="how a trial's repeated times become one value (default min; memory: median)",
    )  # fmt: skip
    p.add_argument(
        "--pin", type=cpu_list, default=(), metavar="CPUS",
        help="run every trial on these CPUs only (sched_setaffinity), e.g. 1 or 0-1",
    )  # fmt: skip
    p.add_argument(
        "--prefetch", action="store_true",
        help="each trial reads its IR files and its OpenVINO libraries into the page cache "
        "before anything is timed",
    )  # fmt: skip


def add_compile_options(p: argparse.ArgumentParser) -> None:
    """What `ab compile` and `ab calibrate` compile, and how each trial measures it."""
    p.add_argument(
        "--model",
        required=True,
        help="preset, cached hub id, checkpoint dir or stateful decoder IR (compiled per rung), "
        "or any other IR or .onnx model (compiled as it is)",
    )
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=[d0,d1,...]",
        help="a model compiled as it is: a static shape for each dynamic input",
    )
    add_synthetic_dtype_option(p)
    add_ladder_option(p, auto=False)
    p.add_argument("--device", default="CPU")
    p.add_argument(
        "--pass-profile",
        action="store_true",
        help="also time OpenVINO's transformation passes (OV_ENABLE_PROFILE_PASS): their total, "
        "and every pass's self time as an endpoint, the passes that moved most first",
    )
    p.add_argument(
        "--counters",
        action="store_true",
        help="read compile_ahead's counters (ITT phases; dependency-sort counters of a patched "
        "NPU compiler) in arms where compile_ahead imports; others report them unavailable",
    )
    p.add_argument(
        "--ir-dir", type=Path, default=None, help="keep (and reuse) the exported rung IR here"
    )
    add_measure_options(p)


def add_calibrate_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--arm", default="A=current", metavar="NAME=SPEC",
        help="the control, as an `ab compile` arm (default A=current)",
    )  # fmt: skip
    p.add_argument(
        "--delta", required=True,
        help="the known change, in percent of the control's median compile CPU time (e.g. 1%%)",
    )  # fmt: skip
    p.add_argument(
        "--calibration-trials", type=count(1), default=3,
        help="trials of the control that measure its compile CPU time first (default 3)",
    )  # fmt: skip
    p.add_argument(
        "--aa", action="store_true",
        help="also run the control again (an A/A arm: the false-positive check)",
    )  # fmt: skip
    add_compile_options(p)


def design_from_args(args: argparse.Namespace) -> DesignOptions:
    """The flags every `ab` experiment kind shares (_common in ab.py)."""
    return DesignOptions(
        pairs=args.pairs,
        warmup=args.warmup,
        first_block=args.first_block,
        timeout_s=args.timeout,
        quiet=args.quiet,
        no_plot=args.no_plot,
        invocation=args.invocation,
    )


def measure_from_args(args: argparse.Namespace) -> MeasureOptions:
    from compile_ahead.profiling.trials.compile_kind.exported_rungs import MeasureOptions

    warmup = args.compile_warmup
    if warmup is None:
        warmup = 1 if args.repeat > 1 else 0
    return MeasureOptions(args.repeat, warmup, args.statistic, tuple(args.pin), args.prefetch)


def compile_run_from_args(args: argparse.Namespace) -> CompileRun:
    """`ab compile`'s and `ab calibrate`'s configuration, its ladder and shapes checked here."""
    from compile_ahead.profiling.session.foreign_model import parse_shapes
    from compile_ahead.profiling.trials.compile_kind.exported_rungs import parse_ladder
    from compile_ahead.profiling.trials.compile_kind.run import CompileOptions, CompileRun

    compile_options = CompileOptions(
        model=args.model,
        ladder=parse_ladder(args.ladder),
        shapes=parse_shapes(args.shape),
        synthetic_dtype=args.synthetic_dtype,
        device=args.device,
        pass_profile=args.pass_profile,
        counters=args.counters,
        ir_dir=args.ir_dir,
        measure=measure_from_args(args),
    )
    return CompileRun(compile_options, design_from_args(args))


def calibration_from_args(args: argparse.Namespace) -> Calibration:
    """`ab calibrate`'s own flags: the known change, then the control."""
    from compile_ahead.profiling.trials.arms import parse_arm
    from compile_ahead.profiling.trials.compile_kind import calibration
    from compile_ahead.profiling.trials.compile_kind.run import Calibration

    delta = calibration.parse_delta(args.delta)
    return Calibration(parse_arm(args.arm, args.device), delta, args.calibration_trials, args.aa)
