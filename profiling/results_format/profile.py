"""A profile-compile output directory: report.json (what was profiled and measured),
trace.pftrace (the Perfetto trace) and passes.txt (every profiled compile's passes). Reading one
needs none of the output marker a later profile-compile looks for before replacing it."""

from __future__ import annotations

import json
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.format_version import version_of

TRACE_NAME = "trace.pftrace"
REPORT_NAME = "report.json"
PASSES_NAME = "passes.txt"
TOOL = "profile-compile"  # report.json's "tool"


def read_profile_report(directory: Path) -> dict:
    """report.json of a profile-compile directory, or one line saying why it is none."""
    path = directory / REPORT_NAME
    try:
        report = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CompileAheadError(f"{path}: unreadable ({err})") from None
    if not isinstance(report, dict) or report.get("tool") != TOOL:
        raise CompileAheadError(f"{path}: not a profile-compile report")
    version_of(report, path)
    return report
