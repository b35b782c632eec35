"""Standalone compile trial: read each rung's IR, compile it, print JSON timings.

Runs under any arm's interpreter (another venv with another OpenVINO release), so it uses only
the standard library, openvino and numpy, and is executed by path:

    python compile_worker.py MANIFEST.json OUT.json

MANIFEST: {"device": "CPU", "config": {"KEY": "VALUE"}, "pass_profile": false,
           "extension_counters": false,
           "rungs": [{"capacity": 1024, "xml": "/tmp/.../rung-1024.xml"}, ...]}

The f16/bf16 weight Converts are re-marked as decompression after reading (rt_info
"decompression_0"; the mark is not stored in IR, and without it the CPU plugin folds the
weights to f32), and the embedding lookup as not to be folded (runtime/fold_guard.py). With
"pass_profile", OpenVINO's per-transformation timing (OV_ENABLE_PROFILE_PASS) is switched on
and summarised per rung. With "extension_counters", the
compile_ahead package is imported before openvino (so its ITT collector is announced) and its
counters are read per rung: ITT phase totals and, when a patched NPU compiler is loaded, the
dependency-sort cache counters. An arm where compile_ahead does not import reports them
unavailable, never as zeros.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

DECOMPRESSION_KEY = "decompression_0"
# runtime/fold_guard.py's mark, under both names OpenVINO has used for it (this worker may run
# another release and cannot import compile_ahead); a name a release does not know is ignored.
NO_FOLDING_KEYS = ("DisableConstantFolding_0", "disabled_constant_folding_0")


def _max_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def remark_decompression(model, ov) -> int:
    """Mark Convert(Constant f16/bf16 -> f32) nodes as weight decompression; returns count."""
    compressed = {ov.Type.f16, ov.Type.bf16}
    marked = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Convert":
            continue
        src = op.input_value(0).get_node()
        if (
            src.get_type_name() == "Constant"
            and src.get_output_element_type(0) in compressed
            and op.get_output_element_type(0) == ov.Type.f32
        ):
            op.get_rt_info()[DECOMPRESSION_KEY] = ""
            marked += 1
    return marked


def remark_lookups(model, ov) -> int:
    """Mark Gathers of a f16/bf16 constant table (through its Convert) not to be folded, as
    our rung graphs are before export (see runtime/fold_guard.py); returns count."""
    compressed = {ov.Type.f16, ov.Type.bf16}
    marked = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Gather":
            continue
        table = op.input_value(0).get_node()
        if table.get_type_name() == "Convert":
            table = table.input_value(0).get_node()
        if table.get_type_name() == "Constant" and table.get_output_element_type(0) in compressed:
            for key in NO_FOLDING_KEYS:
                op.get_rt_info()[key] = ""
            marked += 1
    return marked


def covered_ns(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals."""
    total = 0
    cur_start = cur_end = None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def summarise_passes(lines: list[str]) -> dict:
    """OV_ENABLE_PROFILE_PASS records: wall time covered by pass managers, busiest managers.

    A manager's m_start/m_end lines are written together when it finishes (inner managers
    first), so nesting is resolved by the union of their epoch intervals, not by file order.
    """
    intervals: list[tuple[int, int]] = []
    pending: dict[str, int] = {}
    by_manager: dict[str, int] = {}
    n_pass = 0
    for line in lines:
        parts = line.strip().split(";")
        kind = parts[0]
        if kind == "t":
            n_pass += 1
        elif len(parts) < 3:
            continue
        elif kind == "m":
            by_manager[parts[1]] = by_manager.get(parts[1], 0) + int(parts[2])
        elif kind == "m_start":
            pending[parts[1]] = int(parts[2])
        elif kind == "m_end" and parts[1] in pending:
            intervals.append((pending.pop(parts[1]), int(parts[2])))
    top = sorted(by_manager.items(), key=lambda kv: -kv[1])[:8]
    return {
        "transformations_s": covered_ns(intervals) / 1e9,
        "pass_records": n_pass,
        "top_managers_s": {name: ns / 1e9 for name, ns in top},
    }


class ExtensionCounters:
    """compile_ahead's counters around one compile (import before openvino)."""

    def __init__(self) -> None:
        import compile_ahead  # noqa: F401  (announces the ITT collector to OpenVINO)
        from compile_ahead.profiling import counters

        self._counters = counters
        self.problem = counters.collector_status().problem()

    def begin(self) -> None:
        if self.problem is None:
            self._counters.reset()

    def end(self, top: int = 8) -> dict:
        out: dict = {"depsort": self._counters.depsort_counters().to_json()}
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
        print("usage: compile_worker.py MANIFEST.json OUT.json", file=sys.stderr)
        return 2
    t_start = time.perf_counter()
    with open(argv[1]) as fh:
        manifest = json.load(fh)
    out_path = argv[2]
    pass_file = out_path + ".passes"
    if manifest.get("pass_profile"):
        if os.path.exists(pass_file):
            os.remove(pass_file)
        os.environ["OV_ENABLE_PROFILE_PASS"] = pass_file  # before openvino is loaded
    ext, reason = _extension_counters(bool(manifest.get("extension_counters")))
    import openvino as ov

    t_import = time.perf_counter()
    core = ov.Core()
    device = manifest["device"]
    config = dict(manifest.get("config", {}))
    rungs = []
    pass_offset = 0
    for rung in manifest["rungs"]:
        t0 = time.perf_counter()
        model = core.read_model(rung["xml"])
        t1 = time.perf_counter()
        marked = remark_decompression(model, ov)
        lookups = remark_lookups(model, ov)
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
        if manifest.get("pass_profile") and os.path.exists(pass_file):
            with open(pass_file) as fh:
                fh.seek(pass_offset)
                chunk = fh.read()
                pass_offset = fh.tell()
            entry["passes"] = summarise_passes(chunk.splitlines())
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
        "pass_profile": bool(manifest.get("pass_profile")),
    }
    if manifest.get("pass_profile"):
        result["total_transformations_s"] = sum(
            r.get("passes", {}).get("transformations_s", 0.0) for r in rungs
        )
    with open(out_path, "w") as fh:
        json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
