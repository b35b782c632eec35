"""The rung graphs a compile experiment compiles: built once with our builder and saved as IR
(weights kept in their stored precision), the ladder they take, how each trial compiles and
measures them (MeasureOptions, written into the trial's manifest), and where they are kept."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials.compile_kind import trial_values as cv

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
    from compile_ahead.runtime.ladder.settings.capacities import Ladder

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
