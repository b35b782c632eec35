"""The arms of `ab compile`: each an OpenVINO installation (or a configuration) compiling the
exported rungs in a fresh process of its interpreter running trial.py; the A/A copy of the
control, and a collector environment the same for every arm."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials.arms import PROBE_TIMEOUT_S, ArmSpec, probe
from compile_ahead.profiling.trials.compile_kind.exported_rungs import (
    WORKER,
    ExportedRungs,
    MeasureOptions,
    counter_module,
)
from compile_ahead.profiling.trials.runner import Arm


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
