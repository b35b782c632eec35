"""The compare page of a `profile-compile` output directory: what was profiled, its trace,
the phases of each rung's compile and every pass's self time (from passes.txt, parsed by the
same code as the report's table of the passes that took most time)."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from pathlib import Path

from compile_ahead.profiling.compare import html as h
from compile_ahead.profiling.compare.experiment_page import server_hint, trace_link
from compile_ahead.profiling.compare.html import Column, Row
from compile_ahead.profiling.compare.model import rerun_command
from compile_ahead.profiling.results_format.profile import (
    PASSES_NAME,
    TRACE_NAME,
    read_profile_report,
)
from compile_ahead.profiling.session import passprofile

PHASES = ("total", "build", "compile_model", "transformations", "primitive_create", "other")


@dataclass(frozen=True)
class ProfilePass:
    name: str
    manager: str
    self_ms: float
    calls: int
    share: float | None  # of the compile_model time of every profiled compile


@dataclass
class ProfilePage:
    title: str
    directory: Path
    error: str | None  # the failure a failed profile recorded
    facts: dict[str, str]
    rungs: list[dict]
    passes: list[ProfilePass] | None  # None: no pass profile
    pass_note: str
    traces: dict[str, Path]
    rerun: str | None


def load(directory: Path) -> ProfilePage:
    report = read_profile_report(directory)
    rungs = [r for r in report.get("rungs") or [] if isinstance(r, dict)]
    compile_ns = sum(int((r.get("phases_ns") or {}).get("compile_model") or 0) for r in rungs)
    passes, note = profile_passes(directory, report, compile_ns)
    trace = directory / TRACE_NAME
    traces = {TRACE_NAME: trace} if trace.is_file() else {}
    peak = report.get("peak_rss_bytes")
    facts = {
        "model": str(report.get("model_label", "?")),
        "device": f"{report.get('device', '?')}, inference precision "
        f"{report.get('inference_precision', '?')}",
        "graphs": f"{report.get('graph', '?')}, kinds {', '.join(report.get('graph_kinds') or [])}"
        f", ladder {','.join(map(str, report.get('ladder') or []))}",
        "OpenVINO properties": ", ".join(
            f"{k}={v}" for k, v in (report.get("ov_config") or {}).items()
        )
        or "none added",
        "peak RSS": "n/a" if not isinstance(peak, int) else f"{peak / 2**20:.0f} MiB",
    }
    return ProfilePage(
        title=f"profile-compile: {_model_name(report) or directory.name}",
        directory=directory,
        error=report.get("error") if isinstance(report.get("error"), str) else None,
        facts=facts,
        rungs=rungs,
        passes=passes,
        pass_note=note,
        traces=traces,
        rerun=rerun_command(report.get("invocation")),
    )


def _model_name(report: dict) -> str | None:
    model = report.get("model")
    return str(model["model"]) if isinstance(model, dict) and model.get("model") else None


def profile_passes(
    directory: Path, report: dict, compile_ns: int
) -> tuple[list[ProfilePass] | None, str]:
    """Every pass (by manager) from passes.txt, or the report's top rows where only those
    are left; None and why where the profile has no pass timings."""
    path = directory / PASSES_NAME
    if path.is_file():
        profile = passprofile.parse_file(path)
        rows = [
            ProfilePass(name, manager, ns / 1e6, runs, ns / compile_ns if compile_ns else None)
            for (manager, name), (runs, ns) in profile.self_times().items()
        ]
        rows.sort(key=lambda p: (-p.self_ms, p.name, p.manager))
        problems = "; ".join(profile.problems)
        return rows, f"{len(rows)} passes by manager" + (f" ({problems})" if problems else "")
    top = report.get("top_passes")
    if isinstance(top, dict) and isinstance(top.get("rows"), list):
        rows = [
            ProfilePass(
                str(r["pass"]),
                f"{r['managers']} manager(s)",
                float(r["self_s"]) * 1e3,
                int(r["calls"]),
                float(r["self_ns"]) / compile_ns if compile_ns else None,
            )
            for r in top["rows"]
        ]
        return rows, f"only the {len(rows)} passes the report kept: {PASSES_NAME} is missing"
    if report.get("pass_profile_file") is None:
        return None, "No pass profile: profile-compile ran with --no-pass-profile."
    return None, f"No pass profile: {report['pass_profile_file']} is missing."


def render(page: ProfilePage) -> str:
    parts = [
        f"<h1>{escape(page.title)}</h1>",
        f'<p class="muted">{escape(str(page.directory.resolve()))}</p>',
        h.banners([f"This profile failed: {page.error}"] if page.error else [], "error"),
        h.facts(page.facts),
        "<h3>Trace</h3>" + (_trace(page) if page.traces else '<p class="note">No trace.</p>'),
        "<h3>Rerun locally</h3>"
        + (
            f"<pre><code>{escape(page.rerun)}</code></pre>"
            if page.rerun
            else '<p class="note">The command line was not recorded by this profile.</p>'
        ),
        _rungs(page),
        _passes(page),
    ]
    return h.document(page.title, "\n".join(parts))


def _trace(page: ProfilePage) -> str:
    return server_hint(page.directory) + "".join(
        f"<p>{trace_link(name, path).html}</p>" for name, path in page.traces.items()
    )


def _rungs(page: ProfilePage) -> str:
    if not page.rungs:
        return '<h2>Compiles</h2><p class="note">No compile finished.</p>'
    rows = []
    for r in page.rungs:
        phases = r.get("phases_ns") or {}
        kind = f"prefill L={r.get('chunk')}" if r.get("kind") == "prefill" else str(r.get("kind"))
        values = [phases.get(k) for k in PHASES]
        rows.append(
            Row(
                [h.number(r.get("capacity"), str(r.get("capacity"))), h.text(kind)]
                + [h.number(None if v is None else v / 1e9) for v in values]
                + [
                    h.number(
                        None if r.get("rss_peak_bytes") is None else r["rss_peak_bytes"] / 2**20
                    )
                ]
            )
        )
    cols = [Column("Rung C", True), Column("Kind")]
    cols += [Column(f"{k} s", True) for k in PHASES] + [Column("peak RSS MiB", True)]
    return "<h2>Compiles</h2>" + h.table(cols, rows, "rungs-table")


def _passes(page: ProfilePage) -> str:
    if page.passes is None:
        return f'<h2>Passes</h2><p class="banner">{escape(page.pass_note)}</p>'
    rows = [
        Row(
            [
                h.text(p.name),
                h.text(p.manager),
                h.number(p.self_ms),
                h.number(p.calls, str(p.calls)),
                h.number(
                    None if p.share is None else p.share * 100,
                    None if p.share is None else f"{p.share * 100:.2f}%",
                ),
            ],
            {"data-name": f"{p.name} {p.manager}".lower()},
        )
        for p in page.passes
    ]
    cols = [
        Column("Pass"),
        Column("Manager"),
        Column("self ms", True),
        Column("calls", True),
        Column("Share", True, "of the compile_model time of every profiled compile"),
    ]
    return (
        f'<h2>Passes</h2><p class="note">Self time (a pass\'s duration minus the pass managers '
        f"it ran), summed over every profiled compile; {escape(page.pass_note)}.</p>"
        + h.filters("passes-table", len(rows), flagged=False, what="passes")
        + h.table(cols, rows, "passes-table")
    )
