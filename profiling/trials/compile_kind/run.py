"""Running a compile experiment (`ab compile`, `ab calibrate`): the measurement options, the
arms, the IR, the trials and the report, shared by both commands."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.checks import mark_output_dir
from compile_ahead.profiling.trials.arms import (
    PROBE_TIMEOUT_S,
    ArmSpec,
    check_arm_properties,
    probe,
)
from compile_ahead.profiling.trials.compile_kind import arms as compile_arms
from compile_ahead.profiling.trials.compile_kind import calibration
from compile_ahead.profiling.trials.compile_kind import exported_rungs as compile_rungs
from compile_ahead.profiling.trials.compile_kind.arms import ArmExtras
from compile_ahead.profiling.trials.compile_kind.exported_rungs import ExportedRungs, MeasureOptions
from compile_ahead.profiling.trials.compile_kind.kind import COMPILE
from compile_ahead.profiling.trials.design import make_plan
from compile_ahead.profiling.trials.experiment import report_experiment, run_experiment
from compile_ahead.profiling.trials.run_options import DesignOptions
from compile_ahead.profiling.trials.runner import Arm

_KINDS = {"compile": COMPILE}  # what the engine needs to run and report a compile experiment


@dataclass(frozen=True)
class CompileOptions:
    """What `ab compile` and `ab calibrate` compile and how each trial measures it."""

    model: str
    ladder: tuple[int, ...]
    shapes: dict[str, list[int]]  # a model compiled as it is: each dynamic input's shape
    synthetic_dtype: str | None
    device: str
    pass_profile: bool
    counters: bool
    ir_dir: Path | None  # kept (and reused) exported IR; None: a temporary directory
    measure: MeasureOptions


@dataclass(frozen=True)
class CompileRun:
    """A compile experiment's configuration, settled by the command from its flags."""

    compile: CompileOptions
    design: DesignOptions


@dataclass(frozen=True)
class Calibration:
    """`ab calibrate`'s own settings: the control, the known change and how it is measured."""

    control: ArmSpec
    delta_percent: float
    trials: int  # trials of the control measuring its compile CPU time first
    aa: bool  # also the control again as an A/A arm


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
    run: CompileRun,
    out_dir: Callable[[], Path],
    arms_plan: ArmPlan,
    before: BeforeArms | None = None,
) -> int:
    """Check everything, then ``out_dir()`` (the new results directory), export, run, report."""
    c, d = run.compile, run.design
    make_plan([s.name for s in arms_plan.specs], d.pairs, d.warmup)  # refuses a bad design
    timeout = min(d.timeout_s, PROBE_TIMEOUT_S)
    for spec in arms_plan.specs:  # before anything is written or exported
        check_arm_properties(spec, c.device, timeout)
        probe(spec, c.device, timeout)  # its OpenVINO compiles for the device
    out = out_dir()
    base_config, kv_precision = compile_arms.default_config(c.device)
    with compile_rungs.IRDirectory(c.ir_dir, keep=False) as ir_dir:
        with _no_results_on_refusal(out):
            mark_output_dir(out)
            print(f"exporting {len(c.ladder)} rung graph(s) to {ir_dir} ...", file=sys.stderr)
            exported = compile_rungs.export_rungs(
                c.model, c.ladder, kv_precision, ir_dir, c.shapes, c.synthetic_dtype
            )
        if before is not None:
            arms_plan = before(exported, base_config, out)
        plan = make_plan([s.name for s in arms_plan.specs], d.pairs, d.warmup, d.first_block)
        arms, labels = compile_arms.make_arms(
            arms_plan.specs, exported, c.device, base_config, c.pass_profile, out,
            c.counters, probe_timeout_s=d.timeout_s, measure=c.measure,
            extras=arms_plan.extras,
        )  # fmt: skip
        context = _context(c, exported, arms, kv_precision) | arms_plan.context
        exp = {
            "kind": "compile", "arms": [a.describe() for a in arms], "pairs": d.pairs,
            "warmup": d.warmup, "ladder": list(c.ladder),
            "pass_profile": c.pass_profile, "counters": c.counters, "context": context,
            "labels": labels, "measure": c.measure.describe(), "invocation": d.invocation,
            "first_block": d.first_block,
            **arms_plan.experiment,
        }  # fmt: skip
        records = run_experiment(plan, arms, out, exp, _KINDS, d.timeout_s, d.quiet)
    report_experiment(out, exp, records, _KINDS, no_plot=d.no_plot)
    return 0


def _context(
    c: CompileOptions, exported: ExportedRungs, arms: list[Arm], kv_precision: str
) -> dict[str, str]:
    config = arms[0].info["config"]
    assert isinstance(config, dict)  # the control's compile properties (make_arms)
    config_text = ", ".join(f"{k}={v}" for k, v in config.items())
    return {
        "model": exported.label,
        "graphs": f"decode step (chunk 1), ladder {','.join(map(str, c.ladder))}, "
        f"KV {kv_precision}",
        "device": c.device,
        "arms": "; ".join(
            f"{a.name} = {a.info['openvino']} via {a.info['python']}"
            + (f" (lib {a.info['library_path']})" if a.info.get("library_path") else "")
            for a in arms
        ),
        "compile config (control)": config_text,
        "extension counters": _counters_text(c.counters, arms),
        "measurement": _measure_text(c.measure),
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
    copy, extras = compile_arms.aa_copy(specs[0])
    if copy.name in {s.name for s in specs}:
        raise CompileAheadError(f"--aa: an arm is already named {copy.name}")
    return ArmPlan([specs[0], copy, *specs[1:]], {copy.name: extras})


def run_calibrate(run: CompileRun, cal: Calibration, out_dir: Callable[[], Path]) -> int:
    """`ab calibrate`: measure the control's compile CPU time, then run it against itself plus
    a spin of --delta percent of it (and against itself plainly with --aa)."""
    c, d, control = run.compile, run.design, cal.control
    given = with_aa([control], cal.aa)
    delta_name = control.name + calibration.DELTA_SUFFIX
    placeholder = dataclasses.replace(control, name=delta_name)

    def before(exported: ExportedRungs, base_config: dict, out: Path) -> ArmPlan:
        arms, _ = compile_arms.make_arms(
            [control], exported, c.device, base_config, c.pass_profile, out,
            c.counters, probe_timeout_s=d.timeout_s, measure=c.measure,
        )  # fmt: skip
        print(f"calibrating: {cal.trials} trial(s) of {control.name} ...", file=sys.stderr)
        cpu_s = calibration.measure_control(
            arms[0], cal.trials, out, d.timeout_s, c.measure.statistic
        )
        exp, line = calibration.describe(
            control.name, delta_name, cal.delta_percent, cpu_s, cal.trials
        )
        spin = calibration.delta_arm(control.name, cal.delta_percent, cpu_s)
        extras = {**given.extras, delta_name: spin}
        return ArmPlan([*given.specs, placeholder], extras, {"calibration": exp},
                       {"CALIBRATION": line})  # fmt: skip

    return run_compile_experiment(
        run, out_dir, ArmPlan([*given.specs, placeholder], given.extras), before
    )
