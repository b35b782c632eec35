"""Standalone compile trial: read each rung's IR, compile it, print JSON timings.

Runs under any arm's interpreter (another venv with another OpenVINO release), so it uses only
the standard library, openvino and numpy, and is executed by path:

    python compile_worker.py MANIFEST.json OUT.json

MANIFEST: {"device": "CPU", "config": {"KEY": "VALUE"}, "pass_profile": false,
           "rungs": [{"capacity": 1024, "xml": "/tmp/.../rung-1024.xml"}, ...]}

The f16/bf16 weight Converts are re-marked as decompression after reading (rt_info
"decompression_0"; the mark is not stored in IR, and without it the CPU plugin folds the
weights to f32). With "pass_profile", OpenVINO's per-transformation timing
(OV_ENABLE_PROFILE_PASS) is switched on and summarised per rung. Counters of the compile_ahead
extension are used when that package is importable in the arm, else reported unavailable.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
import time

DECOMPRESSION_KEY = "decompression_0"
EXTENSION_COUNTERS_MODULE = "compile_ahead.profiling.compile_counters"


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


def _extension_counters():
    """The compile_ahead counters hook, or (None, reason)."""
    try:
        module = importlib.import_module(EXTENSION_COUNTERS_MODULE)
    except ImportError as err:
        return None, f"{EXTENSION_COUNTERS_MODULE} not importable in this arm ({err})"
    measure = getattr(module, "measure_compile", None)
    if measure is None:
        return None, f"{EXTENSION_COUNTERS_MODULE} has no measure_compile(fn)"
    return measure, ""


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
    import openvino as ov

    t_import = time.perf_counter()
    core = ov.Core()
    device = manifest["device"]
    config = dict(manifest.get("config", {}))
    measure, reason = _extension_counters()
    rungs = []
    pass_offset = 0
    for rung in manifest["rungs"]:
        t0 = time.perf_counter()
        model = core.read_model(rung["xml"])
        t1 = time.perf_counter()
        marked = remark_decompression(model, ov)
        t2 = time.perf_counter()
        counters = None
        if measure is not None:
            compiled, counters = measure(lambda m=model: core.compile_model(m, device, config))
        else:
            compiled = core.compile_model(model, device, config)
        t3 = time.perf_counter()
        entry = {
            "capacity": rung["capacity"],
            "read_s": t1 - t0,
            "remark_s": t2 - t1,
            "compile_s": t3 - t2,
            "decompression_marked": marked,
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
            {"available": True, "module": EXTENSION_COUNTERS_MODULE}
            if measure is not None
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
