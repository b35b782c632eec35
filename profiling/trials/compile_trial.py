"""Standalone compile trial: read each rung's IR, compile it, print JSON timings.

Runs under any arm's interpreter (another venv with another OpenVINO release), so it uses only
the standard library, openvino and numpy, and is executed by path:

    python compile_trial.py MANIFEST.json OUT.json

MANIFEST: {"device": "CPU", "config": {"KEY": "VALUE"}, "pass_profile": false,
           "passprofile": "/.../profiling/passprofile.py",
           "decompression": "/.../runtime/graphs/decompression.py",
           "fold_guard": "/.../runtime/graphs/fold_guard.py", "extension_counters": false,
           "rungs": [{"capacity": 1024, "xml": "/tmp/.../rung-1024.xml"}, ...]}

The f16/bf16 weight Converts are re-marked as decompression after reading (rt_info
"decompression_0"; the mark is not stored in IR, and without it the CPU plugin folds the weights
to f32), and the embedding lookup is marked not to be folded (graphs/fold_guard.py); both
modules are loaded by path from the manifest. With "pass_profile", OpenVINO's per-transformation
timing (OV_ENABLE_PROFILE_PASS) is switched on, parsed by compile_ahead's passprofile.py (loaded
from the manifest's "passprofile" path), summarised per rung, and each pass's self time (nested
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


def _max_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def load_module(path: str, name: str):
    """A compile_ahead module loaded from its file (the pass-profile parser needs only the
    standard library, the decompression marks only OpenVINO): this arm's interpreter may have
    no compile_ahead installed."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_compile_ahead_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load compile_ahead's {name} from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def add_self_times(totals: dict, runs: dict, profile) -> None:
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
        from compile_ahead import itt_collector as counters
        from compile_ahead.profiling import depsort

        self._counters = counters
        self._depsort = depsort
        self.problem = counters.collector_status().problem()

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


def _extension_counters(wanted: bool):
    """(ExtensionCounters or None, reason when None)."""
    if not wanted:
        return None, "not requested"
    try:
        return ExtensionCounters(), ""
    except ImportError as err:
        return None, f"compile_ahead not importable in this arm ({err})"


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: compile_trial.py MANIFEST.json OUT.json", file=sys.stderr)
        return 2
    t_start = time.perf_counter()
    with open(argv[1]) as fh:
        manifest = json.load(fh)
    out_path = argv[2]
    pass_file = out_path + ".passes"
    profiling = bool(manifest.get("pass_profile"))
    passprofile = load_module(manifest["passprofile"], "passprofile") if profiling else None
    if profiling:
        if os.path.exists(pass_file):
            os.remove(pass_file)
        os.environ["OV_ENABLE_PROFILE_PASS"] = pass_file  # before openvino is loaded
    ext, reason = _extension_counters(bool(manifest.get("extension_counters")))
    import openvino as ov

    decompression = load_module(manifest["decompression"], "decompression")
    fold_guard = load_module(manifest["fold_guard"], "fold_guard")

    t_import = time.perf_counter()
    core = ov.Core()
    device = manifest["device"]
    config = dict(manifest.get("config", {}))
    rungs = []
    pass_offset = 0
    self_s: dict[str, dict[str, float]] = {}
    self_runs: dict[str, dict[str, int]] = {}
    for rung in manifest["rungs"]:
        t0 = time.perf_counter()
        model = core.read_model(rung["xml"])
        t1 = time.perf_counter()
        marked = decompression.mark_weight_decompression(model)
        lookups = fold_guard.keep_lookups_unfolded(model)
        t2 = time.perf_counter()
        if ext is not None:
            ext.begin()
        compiled = core.compile_model(model, device, config)
        t3 = time.perf_counter()
        counters = ext.end() if ext is not None else None
        entry = {
            "capacity": rung["capacity"],
            "read_s": t1 - t0,
            "remark_s": t2 - t1,
            "compile_s": t3 - t2,
            "decompression_marked": marked,
            "lookups_marked": lookups,
            "max_rss_bytes": _max_rss_bytes(),
        }
        if counters is not None:
            entry["extension_counters"] = counters
        if passprofile is not None and os.path.exists(pass_file):
            end = os.path.getsize(pass_file)
            profile = passprofile.parse_file(pass_file, pass_offset, end)
            pass_offset = end
            entry["passes"] = profile.summary()
            add_self_times(self_s, self_runs, profile)
        rungs.append(entry)
        del compiled, model
    result = {
        "openvino_version": ov.get_version(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "device": device,
        "config": config,
        "import_s": t_import - t_start,
        "rungs": rungs,
        "total_compile_s": sum(r["compile_s"] for r in rungs),
        "total_read_s": sum(r["read_s"] for r in rungs),
        "max_rss_bytes": _max_rss_bytes(),
        "extension_counters": (
            {"available": True, "itt_problem": ext.problem}
            if ext is not None
            else {"available": False, "reason": reason}
        ),
        "pass_profile": profiling,
    }
    if profiling:
        result["total_transformations_s"] = sum(
            r.get("passes", {}).get("transformations_s", 0.0) for r in rungs
        )
        result["pass_self_s"] = self_s
        result["pass_runs"] = self_runs
    with open(out_path, "w") as fh:
        json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
