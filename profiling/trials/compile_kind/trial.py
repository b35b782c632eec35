"""Standalone compile trial: read each rung's IR, compile it, print JSON timings.

Runs under any arm's interpreter (another venv with another OpenVINO release), so it uses only
the standard library, openvino and numpy, and is executed by path:

    python trial.py MANIFEST.json OUT.json [PERFCOUNTERS.so]

MANIFEST: {"device": "CPU", "config": {"KEY": "VALUE"}, "pass_profile": false,
           "extension_counters": false, "repeat": 1, "compile_warmup": 0, "cpus": null,
           "prefetch": false, "rungs": [{"capacity": 1024, "xml": "/tmp/.../rung-1024.xml"}]}

The manifest is data only: it names no code. The compile_ahead modules the trial loads are
found beside this file, in the package it belongs to (PACKAGE_FILES), and the compiled counter
module (compile_ahead._perfcounters, installed beside the package or elsewhere by an editable
install) is named on the command line by the `ab` process that starts the trial.

Each rung is read once and compiled compile_warmup + repeat times in a row (caching off: no
CACHE_DIR); every compile is one record in the rung's "compiles" with what meter.py
measures around it ("warmup": true for the compiles the analysis leaves out). The rung's
"compile_s" and the trial's totals and pass fields describe its first measured compile. Only
`ab calibrate` writes "calibration_spin_s" (capacity -> seconds of CPU work added on the
compiling thread inside each measured window; labelled calibration in every output).

The f16/bf16 weight Converts are re-marked as decompression after reading (rt_info
"decompression_0"; the mark is not stored in IR, and without it the CPU plugin folds the weights
to f32), and the embedding lookup is marked not to be folded (graphs/fold_guard.py). With
"pass_profile", OpenVINO's per-transformation timing (OV_ENABLE_PROFILE_PASS) is switched on,
parsed by compile_ahead's passprofile.py, summarised per rung, and each pass's self time (nested
managers left out) summed over the rungs per manager and pass ("pass_self_s"). With
"extension_counters", the compile_ahead package is imported before openvino (so its ITT
collector is announced) and its counters are read per rung: ITT phase totals and, when a patched
NPU compiler is loaded, the dependency-sort cache counters. An arm where compile_ahead does not
import reports them unavailable, never as zeros.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the worker loads these from their files (load_module), never by import
    from compile_ahead.profiling.session.passprofile import PassProfile
    from compile_ahead.profiling.trials.compile_kind.meter import CompileMeter

# The package this file belongs to: compile_ahead/ when installed, the source checkout's root
# (which has the same layout) in an editable install.
PACKAGE = Path(__file__).resolve().parents[3]
PACKAGE_FILES = {
    "passprofile": "profiling/session/passprofile.py",
    "decompression": "runtime/graphs/decompression.py",
    "fold_guard": "runtime/graphs/fold_guard.py",
    "compile_measure": "profiling/trials/compile_kind/meter.py",
}


def _max_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def load_module(name: str) -> ModuleType:
    """A compile_ahead module (PACKAGE_FILES) loaded from its file beside this one (the
    pass-profile parser needs only the standard library, the decompression marks only
    OpenVINO): this arm's interpreter may have no compile_ahead installed."""
    import importlib.util

    path = PACKAGE / PACKAGE_FILES[name]
    spec = importlib.util.spec_from_file_location(f"_compile_ahead_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load compile_ahead's {name} from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def add_self_times(totals: dict, runs: dict, profile: PassProfile) -> None:
    """Accumulate a rung's per-pass self times into manager -> pass -> seconds (and run counts)."""
    for (manager, name), (count, ns) in profile.self_times().items():
        per_manager = totals.setdefault(manager, {})
        per_manager[name] = per_manager.get(name, 0.0) + ns / 1e9
        counted = runs.setdefault(manager, {})
        counted[name] = counted.get(name, 0) + count


class ExtensionCounters:
    """compile_ahead's counters around one compile (import before openvino)."""

    def __init__(self) -> None:
        import compile_ahead  # noqa: F401  (announces the ITT collector to OpenVINO)
        from compile_ahead import itt_collector
        from compile_ahead.profiling.npu_patches import depsort

        self._counters = itt_collector
        self._depsort = depsort
        self.problem = itt_collector.collector_status().problem()

    def begin(self) -> None:
        """Zero what the next compile is measured by: the ITT events and, when a patched NPU
        compiler is loaded, its dependency-sort counters (else each rung would count the
        rungs compiled before it in this process)."""
        if self.problem is None:
            self._counters.reset()
        self._depsort.reset_loaded_counters()

    def end(self, top: int = 8) -> dict:
        out: dict = {"depsort": self._depsort.depsort_reading().to_json()}
        if self.problem is None:
            phases = self._counters.aggregates()
            out["itt_phases_s"] = {f"{a.domain}/{a.name}": a.total_ns / 1e9 for a in phases[:top]}
            out["itt_compile_model_s"] = next(
                (a.total_ns / 1e9 for a in phases if a.name == "Compile model"), None
            )
        else:
            out["itt_unavailable"] = self.problem
        return out


def _extension_counters(wanted: bool) -> tuple[ExtensionCounters | None, str]:
    """(ExtensionCounters or None, reason when None)."""
    if not wanted:
        return None, "not requested"
    try:
        return ExtensionCounters(), ""
    except ImportError as err:
        return None, f"compile_ahead not importable in this arm ({err})"


class PassRecorder:
    """Pass-profile records of each compile, read from the profile file as it grows."""

    def __init__(self, passprofile: ModuleType, path: str) -> None:
        self._passprofile = passprofile
        self._path = path
        self._offset = 0

    def next_profile(self) -> PassProfile | None:
        """Every record written since the last call (None when nothing was written)."""
        if not os.path.exists(self._path):
            return None
        end = os.path.getsize(self._path)
        profile: PassProfile = self._passprofile.parse_file(self._path, self._offset, end)
        self._offset = end
        return profile


def _compile_passes(profile: PassProfile) -> dict:
    self_s: dict[str, dict[str, float]] = {}
    runs: dict[str, dict[str, int]] = {}
    add_self_times(self_s, runs, profile)
    return {
        "passes": profile.summary(),
        "transformations_s": profile.total_ns() / 1e9,
        "pass_self_total_s": sum(sum(p.values()) for p in self_s.values()),
        "pass_self_s": self_s,
        "pass_runs": runs,
    }


def _pass_recorder(manifest: dict, pass_file: str) -> PassRecorder | None:
    """With "pass_profile": OpenVINO's pass timing switched on (before openvino is loaded)
    into ``pass_file``, and its reader."""
    if not manifest.get("pass_profile"):
        return None
    passprofile = load_module("passprofile")
    if os.path.exists(pass_file):
        os.remove(pass_file)
    os.environ["OV_ENABLE_PROFILE_PASS"] = pass_file
    return PassRecorder(passprofile, pass_file)


def _setup(manifest: dict, measure: ModuleType) -> dict:
    """Pin and prefetch as the manifest asks, before openvino loads; what was done."""
    done: dict = {}
    if manifest.get("cpus"):
        done["cpus"] = measure.pin(manifest["cpus"])
    if manifest.get("prefetch"):
        files = [Path(r["xml"]) for r in manifest["rungs"]]
        files += [f.with_suffix(".bin") for f in files] + measure.openvino_files()
        done["prefetched_bytes"] = measure.prefetch(files)
    return done


# core and model are openvino's Core and Model (openvino ships no type information).
def compile_rung(
    core: Any, model: Any, device: str, config: dict, manifest: dict, tools: dict
) -> list:
    """The rung's compiles (warm-ups first), one measured record each."""
    meter, ext, passes = tools["meter"], tools["ext"], tools["passes"]
    spins = manifest.get("calibration_spin_s") or {}
    warmup = int(manifest.get("compile_warmup", 0))
    records = []
    for i in range(warmup + int(manifest.get("repeat", 1))):
        meter.spin_s = float(spins.get(str(tools["capacity"]), 0.0))
        if ext is not None:
            ext.begin()
        meter.begin()
        compiled = core.compile_model(model, device, config)
        record = meter.end()
        record["warmup"] = i < warmup
        if ext is not None:
            record["extension_counters"] = ext.end()
        if passes is not None:
            profile = passes.next_profile()
            if profile is not None:
                record.update(_compile_passes(profile))
        records.append(record)
        del compiled
    return records


def _rung_entry(rung: dict, read: tuple[float, float, float], marks: tuple, compiles: list) -> dict:
    first = next(c for c in compiles if not c["warmup"])
    entry = {
        "capacity": rung["capacity"],
        "read_s": read[1] - read[0],
        "remark_s": read[2] - read[1],
        "compile_s": first["wall_s"],
        "decompression_marked": marks[0],
        "lookups_marked": marks[1],
        "max_rss_bytes": _max_rss_bytes(),
        "compiles": compiles,
    }
    for key in ("extension_counters", "passes"):
        if key in first:
            entry[key] = first[key]
    return entry


def _pass_totals(rungs: list, read_transformations_s: float) -> dict:
    """The trial's pass fields from each rung's first measured compile (and the reads)."""
    self_s: dict[str, dict[str, float]] = {}
    runs: dict[str, dict[str, int]] = {}
    total = read_transformations_s
    for rung in rungs:
        first = next(c for c in rung["compiles"] if not c["warmup"])
        total += first.get("transformations_s", 0.0)
        for key, into in (("pass_self_s", self_s), ("pass_runs", runs)):
            for manager, passes in first.get(key, {}).items():
                per = into.setdefault(manager, {})
                for name, value in passes.items():
                    per[name] = per.get(name, 0) + value
    return {"total_transformations_s": total, "pass_self_s": self_s, "pass_runs": runs}


def read_and_compile(core: Any, modules: tuple, manifest: dict, tools: dict) -> tuple[list, float]:
    """Every rung read, re-marked and compiled: (rung entries, pass time spent in the reads)."""
    decompression, fold_guard = modules
    device, config, passes = manifest["device"], dict(manifest.get("config", {})), tools["passes"]
    rungs = []
    read_transformations_s = 0.0
    for rung in manifest["rungs"]:
        t0 = time.perf_counter()
        model = core.read_model(rung["xml"])
        t1 = time.perf_counter()
        marks = (
            decompression.mark_weight_decompression(model),
            fold_guard.keep_lookups_unfolded(model),
        )
        t2 = time.perf_counter()
        read_profile = passes.next_profile() if passes is not None else None
        if read_profile is not None:
            read_transformations_s += read_profile.total_ns() / 1e9
        tools["capacity"] = rung["capacity"]
        compiles = compile_rung(core, model, device, config, manifest, tools)
        rungs.append(_rung_entry(rung, (t0, t1, t2), marks, compiles))
        del model
    return rungs, read_transformations_s


def _check(manifest: dict) -> None:
    repeat, warmup = manifest.get("repeat", 1), manifest.get("compile_warmup", 0)
    if not isinstance(repeat, int) or repeat < 1 or not isinstance(warmup, int) or warmup < 0:
        raise SystemExit("compile_trial: repeat must be >= 1 and compile_warmup >= 0")
    if str(manifest.get("config", {}).get("CACHE_DIR", "")):
        raise SystemExit("compile_trial: CACHE_DIR is set; a cached compile is an import")


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print("usage: trial.py MANIFEST.json OUT.json [PERFCOUNTERS.so]", file=sys.stderr)
        return 2
    t_start = time.perf_counter()
    with open(argv[1]) as fh:
        manifest = json.load(fh)
    _check(manifest)
    measure = load_module("compile_measure")
    setup = _setup(manifest, measure)
    out_path = argv[2]
    passes = _pass_recorder(manifest, out_path + ".passes")
    profiling = passes is not None
    ext, reason = _extension_counters(bool(manifest.get("extension_counters")))
    import openvino as ov

    decompression = load_module("decompression")
    fold_guard = load_module("fold_guard")

    t_import = time.perf_counter()
    core = ov.Core()
    counters = argv[3] if len(argv) == 4 else None
    tools = {"meter": measure.CompileMeter(counters), "ext": ext,
             "passes": passes}  # fmt: skip
    rungs, read_transformations_s = read_and_compile(
        core, (decompression, fold_guard), manifest, tools
    )
    result = {
        "openvino_version": ov.get_version(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "device": manifest["device"],
        "config": dict(manifest.get("config", {})),
        "import_s": t_import - t_start,
        "repeat": int(manifest.get("repeat", 1)),
        "compile_warmup": int(manifest.get("compile_warmup", 0)),
        **setup,
        "rungs": rungs,
        "total_compile_s": sum(r["compile_s"] for r in rungs),
        "total_read_s": sum(r["read_s"] for r in rungs),
        "max_rss_bytes": _max_rss_bytes(),
        "measures": _measures(tools["meter"], profiling),
        "extension_counters": (
            {"available": True, "itt_problem": ext.problem}
            if ext is not None
            else {"available": False, "reason": reason}
        ),
        "pass_profile": profiling,
    }
    if manifest.get("calibration_spin_s"):
        result["calibration_spin_s"] = manifest["calibration_spin_s"]
    if profiling:
        result.update(_pass_totals(rungs, read_transformations_s))
    with open(out_path, "w") as fh:
        json.dump(result, fh, indent=1)
    return 0


MEASURES = ("wall", "cpu", "instructions", "cycles", "task_clock", "peak_rss", "pass_self")


def _measures(meter: CompileMeter, profiling: bool) -> dict:
    """Each measure's availability in this trial: {"available": bool, "reason": text}."""
    unavailable = dict(meter.unavailable)
    if not profiling:
        unavailable["pass_self"] = "not requested (--pass-profile)"
    return {
        m: {"available": m not in unavailable, **({"reason": unavailable[m]} if m in unavailable
                                                  else {})}
        for m in MEASURES
    }  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv))
