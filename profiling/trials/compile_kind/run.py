"""Running a compile experiment (`ab compile`, `ab calibrate`): the measurement options, the
arms, the IR, the trials and the report, shared by both commands."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.checks import mark_output_dir
from compile_ahead.profiling.session.foreign_model import parse_shapes
from compile_ahead.profiling.trials.arms import (
    PROBE_TIMEOUT_S,
    ArmSpec,
    check_arm_properties,
    parse_arm,
    probe,
)
from compile_ahead.profiling.trials.compile_kind import calibration
from compile_ahead.profiling.trials.compile_kind import experiment as compile_ab
from compile_ahead.profiling.trials.compile_kind.experiment import (
    ArmExtras,
    ExportedRungs,
    MeasureOptions,
)
from compile_ahead.profiling.trials.compile_kind.kind import COMPILE
from compile_ahead.profiling.trials.design import make_plan
from compile_ahead.profiling.trials.experiment import report_experiment, run_experiment
from compile_ahead.profiling.trials.runner import Arm

_KINDS = {"compile": COMPILE}  # what the engine needs to run and report a compile experiment


def measure_from_args(args: argparse.Namespace) -> MeasureOptions:
    warmup = args.compile_warmup
    if warmup is None:
        warmup = 1 if args.repeat > 1 else 0
    return MeasureOptions(args.repeat, warmup, args.statistic, tuple(args.pin), args.prefetch)


@dataclass
class ArmPlan:
    """The arms' specs and what `ab` itself adds to some of them (A/A copy, calibration)."""

    specs: list[ArmSpec]
    extras: dict[str, ArmExtras] = field(default_factory=dict)
    experiment: dict = field(default_factory=dict)  # extra experiment.json keys
    context: dict[str, str] = field(default_factory=dict)  # extra report context lines


# Called once the IR is exported, before the experiment's arms are made (`ab calibrate`
# measures the control there); returns the arms to run.
BeforeArms = Callable[[ExportedRungs, dict, Path], ArmPlan]


@contextlib.contextmanager
def _no_results_on_refusal(out: Path) -> Iterator[None]:
    """A command refused after it made its results directory leaves none behind (so the same
    --out can be given again): everything in it is this run's, since it was absent or empty."""
    existed = out.is_dir()
    try:
        yield
    except BaseException:
        if not existed:
            shutil.rmtree(out, ignore_errors=True)
        elif out.is_dir():
            for entry in out.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink(missing_ok=True)
        raise


def run_compile_experiment(
    args: argparse.Namespace,
    out_dir: Callable[[], Path],
    arms_plan: ArmPlan,
    before: BeforeArms | None = None,
) -> int:
    """Check everything, then ``out_dir()`` (the new results directory), export, run, report."""
    names = [s.name for s in arms_plan.specs]
    make_plan(names, args.pairs, args.warmup)  # refuses a bad design before any work
    ladder = compile_ab.parse_ladder(args.ladder)
    timeout = min(args.timeout, PROBE_TIMEOUT_S)
    for spec in arms_plan.specs:  # before anything is written or exported
        check_arm_properties(spec, args.device, timeout)
        probe(spec, args.device, timeout)  # its OpenVINO compiles for the device
    measure = measure_from_args(args)
    out = out_dir()
    shapes = parse_shapes(args.shape)
    base_config, kv_precision = compile_ab.default_config(args.device)
    with compile_ab.IRDirectory(args.ir_dir, keep=False) as ir_dir:
        with _no_results_on_refusal(out):
            mark_output_dir(out)
            print(f"exporting {len(ladder)} rung graph(s) to {ir_dir} ...", file=sys.stderr)
            exported = compile_ab.export_rungs(
                args.model, ladder, kv_precision, ir_dir, shapes, args.synthetic_dtype
            )
        if before is not None:
            arms_plan = before(exported, base_config, out)
        plan = make_plan(
            [s.name for s in arms_plan.specs], args.pairs, args.warmup, args.first_block
        )
        arms, labels = compile_ab.make_arms(
            arms_plan.specs, exported, args.device, base_config, args.pass_profile, out,
            args.counters, probe_timeout_s=args.timeout, measure=measure,
            extras=arms_plan.extras,
        )  # fmt: skip
        context = _context(args, exported, arms, (ladder, kv_precision), measure)
        context |= arms_plan.context
        exp = {
            "kind": "compile", "arms": [a.describe() for a in arms], "pairs": args.pairs,
            "warmup": args.warmup, "ladder": list(ladder),
            "pass_profile": args.pass_profile, "counters": args.counters, "context": context,
            "labels": labels, "measure": measure.describe(), "invocation": args.invocation,
            "first_block": args.first_block,
            **arms_plan.experiment,
        }  # fmt: skip
        records = run_experiment(plan, arms, out, exp, _KINDS, args.timeout, args.quiet)
    report_experiment(out, exp, records, _KINDS, no_plot=args.no_plot)
    return 0


def _context(
    args: argparse.Namespace,
    exported: ExportedRungs,
    arms: list[Arm],
    graphs: tuple[tuple[int, ...], str],
    measure: MeasureOptions,
) -> dict[str, str]:
    ladder, kv_precision = graphs
    config_text = ", ".join(f"{k}={v}" for k, v in arms[0].info["config"].items())
    return {
        "model": exported.label,
        "graphs": f"decode step (chunk 1), ladder {','.join(map(str, ladder))}, KV {kv_precision}",
        "device": args.device,
        "arms": "; ".join(
            f"{a.name} = {a.info['openvino']} via {a.info['python']}"
            + (f" (lib {a.info['library_path']})" if a.info.get("library_path") else "")
            for a in arms
        ),
        "compile config (control)": config_text,
        "extension counters": _counters_text(args.counters, arms),
        "measurement": _measure_text(measure),
    }


def _measure_text(m: MeasureOptions) -> str:
    text = f"{m.repeat} compile(s) per rung per trial"
    if m.compile_warmup:
        text += f" after {m.compile_warmup} warm-up compile(s) (recorded, not used)"
    if m.repeat > 1:
        text += f", {m.statistic} of the repeats (memory: median)"
    text += f"; pinned to CPUs {','.join(map(str, m.cpus))}" if m.cpus else "; not pinned"
    return text + ("; files prefetched into the page cache" if m.prefetch else "")


def _counters_text(requested: bool, arms: list[Arm]) -> str:
    if not requested:
        return "not requested (--counters)"
    return "; ".join(
        f"{a.name}: {'read' if a.info['compile_ahead_importable'] else 'unavailable'}"
        + ("" if a.info["compile_ahead_importable"] else " (compile_ahead not importable there)")
        for a in arms
    )


def with_aa(specs: list[ArmSpec], aa: bool) -> ArmPlan:
    """The arms as given, with ``aa`` the control again as the second arm."""
    if not aa:
        return ArmPlan(list(specs))
    copy, extras = compile_ab.aa_copy(specs[0])
    if copy.name in {s.name for s in specs}:
        raise CompileAheadError(f"--aa: an arm is already named {copy.name}")
    return ArmPlan([specs[0], copy, *specs[1:]], {copy.name: extras})


def run_calibrate(args: argparse.Namespace, out_dir: Callable[[], Path]) -> int:
    """`ab calibrate`: measure the control's compile CPU time, then run it against itself plus
    a spin of --delta percent of it (and against itself plainly with --aa)."""
    delta = calibration.parse_delta(args.delta)
    control = parse_arm(args.arm, args.device)
    given = with_aa([control], args.aa)
    delta_name = control.name + calibration.DELTA_SUFFIX
    placeholder = dataclasses.replace(control, name=delta_name)
    measure = measure_from_args(args)

    def before(exported: ExportedRungs, base_config: dict, out: Path) -> ArmPlan:
        arms, _ = compile_ab.make_arms(
            [control], exported, args.device, base_config, args.pass_profile, out,
            args.counters, probe_timeout_s=args.timeout, measure=measure,
        )  # fmt: skip
        print(f"calibrating: {args.calibration_trials} trial(s) of {control.name} ...",
              file=sys.stderr)  # fmt: skip
        cpu_s = calibration.measure_control(
            arms[0], args.calibration_trials, out, args.timeout, measure.statistic
        )
        exp, line = calibration.describe(
            control.name, delta_name, delta, cpu_s, args.calibration_trials
        )
        extras = {**given.extras, delta_name: calibration.delta_arm(control.name, delta, cpu_s)}
        return ArmPlan([*given.specs, placeholder], extras, {"calibration": exp},
                       {"CALIBRATION": line})  # fmt: skip

    return run_compile_experiment(
        args, out_dir, ArmPlan([*given.specs, placeholder], given.extras), before
    )
