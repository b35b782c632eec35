"""`compile-ahead ab compile`: compile time per rung, OpenVINO installation against
OpenVINO installation (or configuration against configuration).

The rung graphs are built once here with our builder and saved as IR (weights kept in their
stored precision). Every trial is one fresh process of the arm's interpreter running the
standalone trial.py, which reads the IR, re-marks the weight decompression and
compiles each rung in ladder order (``--repeat`` times, after ``--compile-warmup`` compiles),
measuring each compile (meter.py): wall, CPU time, instructions and cycles where the
kernel counts them, peak RSS, and with --pass-profile the passes' self time.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials.analysis import (
    Analysis,
    Endpoint,
    Getter,
    Reason,
    result_field,
)
from compile_ahead.profiling.trials.arms import PROBE_TIMEOUT_S, ArmSpec, probe
from compile_ahead.profiling.trials.compile_kind import trial_values as cv
from compile_ahead.profiling.trials.runner import Arm

WORKER = Path(__file__).with_name("trial.py")


def counter_module() -> str | None:
    """Path of compile_ahead._perfcounters (a trial's command line names it: it may not be
    beside the package in an editable install), None when not built."""
    import importlib.util

    spec = importlib.util.find_spec("compile_ahead._perfcounters")
    return None if spec is None else spec.origin


@dataclass(frozen=True)
class MeasureOptions:
    """How each trial compiles and measures (the same for every arm of an experiment)."""

    repeat: int = 1
    compile_warmup: int = 0
    statistic: str = cv.TIME_STATISTIC_DEFAULT
    cpus: tuple[int, ...] = ()
    prefetch: bool = False

    def manifest(self) -> dict:
        return {
            "repeat": self.repeat,
            "compile_warmup": self.compile_warmup,
            "cpus": list(self.cpus) or None,
            "prefetch": self.prefetch,
        }

    def describe(self) -> dict:
        return {
            "repeat": self.repeat, "compile_warmup": self.compile_warmup,
            "statistic": self.statistic, "cpus": list(self.cpus), "prefetch": self.prefetch,
        }  # fmt: skip

    @classmethod
    def from_experiment(cls, exp: Mapping) -> MeasureOptions:
        """The options an experiment.json recorded (defaults for one written before them)."""
        given = exp.get("measure") or {}
        return cls(
            int(given.get("repeat", 1)),
            int(given.get("compile_warmup", 0)),
            str(given.get("statistic", cv.TIME_STATISTIC_DEFAULT)),
            tuple(given.get("cpus") or ()),
            bool(given.get("prefetch", False)),
        )


def parse_ladder(text: str) -> tuple[int, ...]:
    """The runtime's ladder rules (positive, increasing multiples of 16, no empty rung), so a
    trial never fails on a ladder we could have refused up front."""
    from compile_ahead.runtime.ladder.capacities import Ladder

    return Ladder.parse(text).rungs


@dataclass(frozen=True)
class ExportedRungs:
    directory: Path
    rungs: tuple[int, ...]
    kv_precision: str
    model: dict  # ModelSource.describe()
    label: str

    def manifest(
        self,
        device: str,
        config: dict[str, str],
        pass_profile: bool,
        counters: bool = False,
        measure: MeasureOptions | None = None,
    ) -> dict:
        return {
            **(measure or MeasureOptions()).manifest(),
            "device": device,
            "config": config,
            "pass_profile": pass_profile,
            "extension_counters": counters,
            "rungs": [
                {"capacity": c, "xml": str(self.directory / f"rung-{c}.xml")} for c in self.rungs
            ],
        }


def export_rungs(
    model_name: str,
    ladder: Sequence[int],
    kv_precision: str,
    directory: Path,
    shapes: dict[str, list[int]] | None = None,
    synthetic_dtype: str | None = None,
) -> ExportedRungs:
    """Save each rung's decode graph once as IR (reused if already there). A model that is
    not a stateful decoder (any IR or ONNX file) is one graph, made static with ``shapes``,
    saved as rung 0."""
    import openvino as ov

    from compile_ahead.profiling.session.foreign_model import model_file, read_static
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.sources.resolve import resolve_model

    directory.mkdir(parents=True, exist_ok=True)
    foreign = model_file(model_name)
    if foreign is not None:
        if synthetic_dtype is not None:
            raise CompileAheadError(f"--synthetic-dtype: {foreign} is compiled as it is")
        ov.save_model(read_static(foreign, shapes or {}), str(directory / "rung-0.xml"))
        described = {"model": str(foreign), "synthetic": False, "origin": "as given"}
        return ExportedRungs(directory, (0,), kv_precision, described, f"{foreign} (as it is)")
    if shapes:
        raise CompileAheadError("--shape is for models compiled as they are, not decoders")
    source = resolve_model(model_name, synthetic_dtype=synthetic_dtype)
    stamp_path = directory / "export.json"
    identity = {k: source.describe().get(k) for k in ("model", "synthetic", "origin")}
    stamp = {"model": identity, "kv_precision": kv_precision}
    previous = json.loads(stamp_path.read_text()) if stamp_path.exists() else None
    for capacity in ladder:
        xml = directory / f"rung-{capacity}.xml"
        if previous == stamp and xml.exists() and xml.with_suffix(".bin").exists():
            continue
        model = source.build_graph(GraphSpec(capacity=capacity, chunk=1, kv_precision=kv_precision))
        ov.save_model(model, str(xml), compress_to_fp16=False)
        del model
    stamp_path.write_text(json.dumps(stamp))
    return ExportedRungs(directory, tuple(ladder), kv_precision, source.describe(), source.label)


def default_config(device: str) -> tuple[dict[str, str], str]:
    """The compile properties our runtime uses for a decode graph on ``device`` as strings
    (the device's decode defaults included), and the KV precision matching the inference
    precision (a mismatch adds a reorder of the whole cache)."""
    from compile_ahead.runtime.base.ov_core import openvino_error_summary
    from compile_ahead.runtime.base.precision import OV_TYPES
    from compile_ahead.runtime.compile.settings.options import CompileOptions, device_config

    try:
        options = CompileOptions(device=device).resolved().for_graph("decode")
        raw = device_config(options)
    except RuntimeError as err:
        raise CompileAheadError(f"--device {device}: {openvino_error_summary(err)}") from err
    names = {str(t): n for n, t in OV_TYPES.items()}
    config = {k: names.get(str(v), str(v)) for k, v in raw.items()}
    return config, str(options.kv_precision)


def make_arms(
    specs: Sequence[ArmSpec],
    exported: ExportedRungs,
    device: str,
    base_config: dict[str, str],
    pass_profile: bool,
    manifest_dir: Path,
    counters: bool = False,
    probe_timeout_s: float = PROBE_TIMEOUT_S,
    measure: MeasureOptions | None = None,
    extras: Mapping[str, ArmExtras] | None = None,
) -> tuple[list[Arm], dict[str, str]]:
    """Runner arms (one manifest each) and a table label per arm (name + OpenVINO release).
    Each arm's interpreter is probed (arms.probe: its OpenVINO, and that it compiles for the
    device), for at most ``probe_timeout_s`` (capped at the default).
    ``extras`` adds to an arm's manifest, info and label (the A/A copy, the calibration arm)."""
    arms: list[Arm] = []
    labels: dict[str, str] = {}
    for spec in specs:
        info = probe(spec, device, min(probe_timeout_s, PROBE_TIMEOUT_S))
        config = {**base_config, **spec.config}
        if config.get("CACHE_DIR"):
            raise CompileAheadError(
                f"--arm {spec.name}: CACHE_DIR would turn the trials' compiles into imports"
            )
        extra = (extras or {}).get(spec.name, ArmExtras())
        manifest = manifest_dir / f"manifest-{spec.name}.json"
        content = exported.manifest(device, config, pass_profile, counters, measure)
        manifest.write_text(json.dumps(content | extra.manifest))
        env, unset = spec.process_env()
        env, unset = symmetric_collector_env(env, unset, counters)
        release = str(info["openvino"]).split("-")[0]
        arms.append(
            Arm(
                spec.name,
                worker_command(spec.python, manifest),
                env=env,
                unset_env=unset,
                info={
                    "spec": spec.text,
                    "python": spec.python,
                    "library_path": spec.library_path,
                    "openvino": info["openvino"],
                    "compile_ahead_importable": info["compile_ahead"],
                    "config": config,
                    **extra.info,
                },
            )
        )
        props = ", ".join(f"{k}={v}" for k, v in spec.config.items())
        labels[spec.name] = f"{spec.name}: OV {release}" + (f", {props}" if props else "")
        labels[spec.name] += extra.label
    return arms, labels


def worker_command(python: str, manifest: Path) -> tuple[str, ...]:
    """A trial: trial.py by path under the arm's ``python``; the manifest is data only,
    and the counter module, when built, is named here, never in a file a trial reads."""
    counters = counter_module()
    return (python, "-s", str(WORKER), str(manifest), "{out}", *([counters] if counters else []))


@dataclass(frozen=True)
class ArmExtras:
    """What an arm adds beyond its spec: manifest keys only `ab` itself sets (the
    calibration spin), arm info for the reports, a label suffix."""

    manifest: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    label: str = ""


AA_SUFFIX = "-aa"


def aa_copy(control: ArmSpec) -> tuple[ArmSpec, ArmExtras]:
    """The control run again as another arm (an A/A comparison in the same design)."""
    import dataclasses

    copy = dataclasses.replace(control, name=control.name + AA_SUFFIX)
    return copy, ArmExtras(info={"aa_of": control.name}, label=" (A/A: the control again)")


def aa_arms(arms: list[dict]) -> tuple[str, ...]:
    """Names of an experiment's A/A arms (from experiment.json's arm records)."""
    return tuple(a["name"] for a in arms if a.get("aa_of"))


def symmetric_collector_env(
    env: dict[str, str], unset: tuple[str, ...], counters: bool
) -> tuple[dict[str, str], tuple[str, ...]]:
    """Keep our ITT collector out of the arms unless counters are asked for.

    Importing compile_ahead here pointed INTEL_LIBITTNOTIFY64 at our collector; inherited, it
    would load into every arm's OpenVINO (other releases included) and cost time in some arms
    and not others. A collector the user set (e.g. VTune's) is left alone.
    """
    import compile_ahead

    env = dict(env)
    ours = compile_ahead._ITT_COLLECTOR_PATH if not compile_ahead._ITT_ENV_PRESET else None
    if ours is not None and os.environ.get(compile_ahead.ITT_ENV) == ours:
        unset = (*unset, compile_ahead.ITT_ENV)
    if not counters:
        env.setdefault(compile_ahead.ITT_OPT_OUT_ENV, "0")
    return env, unset


def _sum_rungs(*path: str) -> Getter:
    def get(result: dict) -> float | None:
        rungs = result.get("rungs")
        if not isinstance(rungs, list) or not rungs:
            return None
        values = [result_field(*path)(r) for r in rungs]
        present = [v for v in values if v is not None]
        return None if len(present) < len(values) else sum(present)

    return get


def measure_reason(measure: str) -> Reason:
    """Why a trial has no value of ``measure``: its own record of the measure's availability."""

    def reason(result: dict) -> str | None:
        measures = result.get("measures")
        if not isinstance(measures, dict):
            return "not measured by this trial (recorded before the measure existed)"
        entry = measures.get(measure)
        if isinstance(entry, dict) and not entry.get("available", True):
            return str(entry.get("reason") or "unavailable")
        return None

    return reason


def _first_of(*getters: Getter) -> Getter:
    def get(result: dict) -> float | None:
        return next((v for g in getters if (v := g(result)) is not None), None)

    return get


# key, label, unit, compile-record field, measure name (for the reason when unavailable)
_PER_COMPILE = (
    ("cpu_total", "Compile CPU time (user+sys, all threads), all rungs", "s", "cpu_s", "cpu"),
    ("instructions_total", "Instructions (user), all rungs", "instructions", "instructions",
     "instructions"),
    ("cycles_total", "Cycles (user), all rungs", "cycles", "cycles", "cycles"),
)  # fmt: skip


# The endpoint a compile A/B leads with: named in the report's header and first among its
# verdicts, marked on the compare page (release histories draw the compile wall). Where every
# arm counted instructions:u (a machine with a PMU the kernel exposes), instructions: they vary
# least between runs, as frequency and other tenants do not move them (rustc-perf's and LLVM's
# compile-time tracker's default). Without counters, the compile wall, chosen with
# benchmarks/experiments/measurement_power.py on a 2-vCPU VM (docs/results.md, "Measurement power").
COUNTERS_DEFAULT = "instructions_total"
NO_COUNTERS_DEFAULT = "compile_total"
NO_COUNTERS_WHY = (
    "the compile wall, which saw calibrated changes at least as often as CPU time; a serial "
    "pass's saving is a larger share of the wall than of a multi-threaded compile's CPU time"
)


def default_endpoint(analysis: Analysis) -> tuple[str, str]:
    """The key of ``analysis``'s default endpoint and the rule that chose it."""
    keys = {ep.key for ep in analysis.endpoints}
    if COUNTERS_DEFAULT in keys and COUNTERS_DEFAULT not in analysis.unavailable:
        counted = analysis.values[COUNTERS_DEFAULT]
        if all(any(v is not None for v in per_arm) for per_arm in counted.values()):
            return COUNTERS_DEFAULT, "instructions:u, counted by every arm"
    return NO_COUNTERS_DEFAULT, f"no instruction counts: {NO_COUNTERS_WHY}"


def compile_endpoints(
    ladder: Sequence[int],
    pass_profile: bool,
    counters: bool = False,
    measure: MeasureOptions | None = None,
) -> list[Endpoint]:
    m = measure or MeasureOptions()
    stat = m.statistic
    label = cv.statistic_label(stat, m.repeat, m.compile_warmup)
    mem_label = cv.statistic_label(cv.MEMORY_STATISTIC, m.repeat, m.compile_warmup)
    wall = ("wall_s",)
    eps = [
        Endpoint(f"compile_{c}", f"Compile wall C={c}", "s", "lower",
                 cv.rung_getter(i, wall, stat), label, measure_reason("wall"))
        for i, c in enumerate(ladder)
    ]  # fmt: skip
    eps.append(Endpoint("compile_total", "Compile wall, all rungs", "s", "lower",
                        cv.total_getter(wall, stat), label, measure_reason("wall")))  # fmt: skip
    for key, text, unit, field_name, name in _PER_COMPILE:
        getter = cv.total_getter((field_name,), stat)
        eps.append(Endpoint(key, text, unit, "lower", getter, label, measure_reason(name)))
    peak = cv.total_getter(("peak_rss_bytes",), cv.MEMORY_STATISTIC, max)
    eps.append(Endpoint("compile_peak_rss", "Peak RSS during compile_model, max over rungs",
                        "bytes", "lower", peak, mem_label, measure_reason("peak_rss")))  # fmt: skip
    read = result_field("total_read_s")
    eps.append(Endpoint("read_total", "IR read, all rungs", "s", "lower", read))
    if pass_profile:
        eps += _pass_endpoints(stat, label)
    if counters:
        itt = _first_of(
            cv.total_getter(("extension_counters", "itt_compile_model_s"), stat),
            _sum_rungs("extension_counters", "itt_compile_model_s"),
        )
        eps.append(Endpoint("itt_compile", "ITT 'Compile model' region", "s", "lower", itt, label))
    rss = result_field("max_rss_bytes")
    eps.append(Endpoint("max_rss", "Peak RSS of the trial", "bytes", "lower", rss))
    wall_trial = result_field("trial_wall_s")
    eps.append(Endpoint("process_wall", "Trial process wall", "s", "lower", wall_trial))
    return eps


def _pass_endpoints(stat: str, label: str) -> list[Endpoint]:
    transformations = _first_of(
        cv.total_getter(("transformations_s",), stat), result_field("total_transformations_s")
    )

    def self_sum(result: dict) -> float | None:
        """Every pass's self time of a trial, summed (the managers' own overhead left out)."""
        per_manager = cv.pass_self_times(result, stat)
        if per_manager is None:
            return None
        return sum(sum(passes.values()) for passes in per_manager.values())

    reason = measure_reason("pass_self")
    return [
        Endpoint("transformations", "Transformation passes (in compile_model)", "s", "lower",
                 transformations, label, reason),
        Endpoint("pass_self_total", "Pass self time, all passes", "s", "lower", self_sum, label,
                 reason),
    ]  # fmt: skip


class IRDirectory:
    """A given directory (kept) or a temporary one (removed on exit unless keep, also on
    Ctrl-C and on SIGTERM, which the CLI turns into KeyboardInterrupt)."""

    def __init__(self, path: Path | None, keep: bool):
        self.temporary = path is None
        self.keep = keep or path is not None
        self.path = path or Path(tempfile.mkdtemp(prefix="compile-ahead-ab-ir-"))

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc: object) -> None:
        if self.temporary and not self.keep:
            shutil.rmtree(self.path, ignore_errors=True)
