"""`compile-ahead ab compile`: full compile wall per rung, OpenVINO installation against
OpenVINO installation (or configuration against configuration).

The rung graphs are built once here with our builder and saved as IR (weights kept in their
stored precision). Every trial is one fresh process of the arm's interpreter running the
standalone compile_trial.py, which reads the IR, re-marks the weight decompression and
compiles each rung in ladder order.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling import passprofile
from compile_ahead.profiling.trials.analysis import Endpoint, result_field
from compile_ahead.profiling.trials.arms import ArmSpec
from compile_ahead.profiling.trials.runner import Arm
from compile_ahead.runtime.graphs import decompression, fold_guard

WORKER = Path(__file__).with_name("compile_trial.py")


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
        self, device: str, config: dict[str, str], pass_profile: bool, counters: bool = False
    ) -> dict:
        return {
            "device": device,
            "config": config,
            "pass_profile": pass_profile,
            # the trial loads these by path (see compile_trial.load_module)
            "passprofile": str(Path(passprofile.__file__).resolve()),
            "decompression": str(Path(decompression.__file__).resolve()),
            "fold_guard": str(Path(fold_guard.__file__).resolve()),
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

    from compile_ahead.profiling.foreign_model import model_file, read_static
    from compile_ahead.runtime.graphs.decoder import GraphSpec
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
    from compile_ahead.runtime.compile.options import CompileOptions, device_config

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
    infos: Sequence[dict],
    exported: ExportedRungs,
    device: str,
    base_config: dict[str, str],
    pass_profile: bool,
    manifest_dir: Path,
    counters: bool = False,
) -> tuple[list[Arm], dict[str, str]]:
    """Runner arms (one manifest each) and a table label per arm (name + OpenVINO release),
    from each arm's probe (``infos``, arms.probe: it compiles for the device)."""
    arms: list[Arm] = []
    labels: dict[str, str] = {}
    for spec, info in zip(specs, infos, strict=True):
        config = {**base_config, **spec.config}
        manifest = manifest_dir / f"manifest-{spec.name}.json"
        manifest.write_text(json.dumps(exported.manifest(device, config, pass_profile, counters)))
        env, unset = spec.process_env()
        env, unset = symmetric_collector_env(env, unset, counters)
        release = str(info["openvino"]).split("-")[0]
        arms.append(
            Arm(
                spec.name,
                (spec.python, "-s", str(WORKER), str(manifest), "{out}"),
                env=env,
                unset_env=unset,
                info={
                    "spec": spec.text,
                    "python": spec.python,
                    "library_path": spec.library_path,
                    "openvino": info["openvino"],
                    "compile_ahead_importable": info["compile_ahead"],
                    "config": config,
                },
            )
        )
        extra = ", ".join(f"{k}={v}" for k, v in spec.config.items())
        labels[spec.name] = f"{spec.name}: OV {release}" + (f", {extra}" if extra else "")
    return arms, labels


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


def _sum_rungs(*path: str):
    def get(result: dict) -> float | None:
        rungs = result.get("rungs")
        if not isinstance(rungs, list) or not rungs:
            return None
        values = [result_field(*path)(r) for r in rungs]
        return None if any(v is None for v in values) else sum(values)  # type: ignore[misc]

    return get


def compile_endpoints(
    ladder: Sequence[int], pass_profile: bool, counters: bool = False
) -> list[Endpoint]:
    eps = [
        Endpoint(f"compile_{c}", f"Compile wall C={c}", "s", "lower", _rung_field(i, "compile_s"))
        for i, c in enumerate(ladder)
    ]
    total = result_field("total_compile_s")
    eps.append(Endpoint("compile_total", "Compile wall, all rungs", "s", "lower", total))
    read = result_field("total_read_s")
    eps.append(Endpoint("read_total", "IR read, all rungs", "s", "lower", read))
    if pass_profile:
        eps.append(
            Endpoint(
                "transformations",
                "Transformation passes (read + compile)",
                "s",
                "lower",
                result_field("total_transformations_s"),
            )
        )
        eps.append(
            Endpoint("pass_self_total", "Pass self time, all passes", "s", "lower", _self_sum)
        )
    if counters:
        itt = _sum_rungs("extension_counters", "itt_compile_model_s")
        eps.append(Endpoint("itt_compile", "ITT 'Compile model' region", "s", "lower", itt))
    rss = result_field("max_rss_bytes")
    eps.append(Endpoint("max_rss", "Peak RSS of the trial", "bytes", "lower", rss))
    wall = result_field("trial_wall_s")
    eps.append(Endpoint("process_wall", "Trial process wall", "s", "lower", wall))
    return eps


def _self_sum(result: dict) -> float | None:
    """Every pass's self time of a trial, summed (the managers' own overhead left out)."""
    per_manager = result.get("pass_self_s")
    if not isinstance(per_manager, dict):
        return None
    return sum(sum(passes.values()) for passes in per_manager.values())


def _rung_field(index: int, key: str):
    return result_field("rungs", index, key)


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
