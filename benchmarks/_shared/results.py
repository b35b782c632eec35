"""A benchmark's result file: one JSON object marked with what wrote it, so a reader can tell a
benchmark result from other JSON and know its layout's version.

    {"kind": "compile-ahead.benchmark", "version": 1, "benchmark": "compile_cache",
     "args": {...the command line's options...}, "results": {...what the script measured...}}

Values that are not numbers (NaN and infinities: a median of no values, a ratio without pairs)
are written as null, so the file is strict JSON. The file is written through a staged file and
renamed into place, so an interrupted run leaves no half-written result. `compile-ahead compare
FILE.json` renders it (profiling/compare/benchmark_page.py reads this layout).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from compile_ahead.output.atomic import write_json_atomic
from compile_ahead.profiling.compare.benchmark_page import KIND, VERSION


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (and paths, tuples and other
    values JSON has no form for turned into strings and lists)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    return str(value)


def write_result(path: Path, benchmark: str, results: Any, args: argparse.Namespace) -> Path:
    """Write ``results`` of ``benchmark`` run with ``args`` to ``path`` (see the module)."""
    document = {
        "kind": KIND,
        "version": VERSION,
        "benchmark": benchmark,
        "args": finite(vars(args)),
        "results": finite(results),
    }
    return write_json_atomic(path, document)
