"""`campaign report`: per cell the files `ab report` writes for it (its directory holds the
cell's experiment.json and trials.jsonl, so `compile-ahead ab report CELL_DIR` rebuilds them),
and across cells one table (cell, endpoint, effect, CI, pairs, verdict) with a forest plot per
endpoint, read from the cells' own JSON so the table says exactly what each cell's report says.

The table's endpoints: for schedule campaigns the seed's (foreground compile, critical path,
decode, boundary waits, and top-1 agreement as a count); for compile campaigns the compile wall
per rung and in all, compile CPU time, instructions and pass self time where they were measured;
or the spec's own list.
Compile campaigns also get history.py's plots and per-pass moves.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
from pathlib import Path

from compile_ahead.atomic import writing
from compile_ahead.errors import write_error
from compile_ahead.output_dirs import make_staging_dir, publish_dir
from compile_ahead.outputs import check_replaceable_dir, mark_output_dir
from compile_ahead.profiling.campaigns import history, plots
from compile_ahead.profiling.campaigns.cells import CellRun, cell_runs
from compile_ahead.profiling.campaigns.fingerprint import describe
from compile_ahead.profiling.campaigns.store import Store
from compile_ahead.profiling.trials.experiment import report_experiment, save_experiment
from compile_ahead.profiling.trials.report import display_unit, fmt_number, table_row

SEED_ENDPOINTS = ("foreground_compile", "critical_path", "decode", "boundary_wait")
# Besides the compile wall per rung and in all: compile CPU time, instructions, pass self time.
COMPILE_ENDPOINTS = ("cpu_total", "instructions_total", "pass_self_total")
TOP1_TALLY = "Boundary top-1 agreement"
SUMMARY = "campaign"


def table_endpoints(kind: str, data: dict, chosen: list[str] | None) -> list[dict]:
    """The cell's endpoints in the table: the spec's, or the kind's that this cell measured."""
    eps = data["endpoints"]
    if chosen is not None:
        return [e for e in eps if e["key"] in chosen]
    wanted = history.is_compile_wall if kind == "compile" else SEED_ENDPOINTS.__contains__
    extra = COMPILE_ENDPOINTS if kind == "compile" else ()
    return [
        e
        for e in eps
        if (wanted(e["key"]) or e["key"] in extra)
        and any(s is not None for s in e["comparisons"].values())
    ]


def _effect(s: dict, unit: str) -> tuple[str, str]:
    shown, div = display_unit(unit)
    effect = f"{'+' if s['mean_diff'] > 0 else ''}{fmt_number(s['mean_diff'] / div)} {shown}"
    if s["percent"] is not None:
        effect += f" ({'+' if s['percent'] > 0 else ''}{fmt_number(s['percent'])}%)"
    ci = "\u2014"
    if s["ci_low"] is not None and s["ci_high"] is not None:
        ci = f"{fmt_number(s['ci_low'] / div)} to {fmt_number(s['ci_high'] / div)} {shown}"
    return effect, ci


def cell_rows(run: CellRun, data: dict, kind: str, chosen: list[str] | None) -> list[dict]:
    """One row per endpoint and treatment of a cell (and its top-1 tally)."""
    control = data["control"]
    rows = []
    for ep in table_endpoints(kind, data, chosen):
        for arm, s in ep["comparisons"].items():
            effect, ci = ("\u2014", "\u2014") if s is None else _effect(s, ep["unit"])
            rows.append(
                {
                    "cell": run.label,
                    "machine": run.machine,
                    "endpoint": ep["key"],
                    "label": ep["label"],
                    "unit": ep["unit"],
                    "comparison": s,
                    "versus": f"{arm} vs {control}",
                    "effect": effect,
                    "ci": ci,
                    "pairs": 0 if s is None else s["n"],
                    "verdict": "no complete pair" if s is None else s["verdict"],
                }
            )
    for tally in data.get("tallies", []):
        if kind != "compile" and tally["label"].startswith(TOP1_TALLY):
            for arm, text in tally["per_arm"].items():
                if arm != control:
                    rows.append(
                        {
                            "cell": run.label,
                            "machine": run.machine,
                            "endpoint": "top1",
                            "label": tally["label"],
                            "unit": "",
                            "comparison": None,
                            "versus": f"{arm} vs {control}",
                            "effect": text,
                            "ci": "\u2014",
                            "pairs": run.blocks,
                            "verdict": "a count, not tested",
                        }
                    )
    return rows


def _write_cell(run: CellRun, out: Path, no_plot: bool) -> dict:
    """The cell's directory as `ab report` leaves one; its JSON."""
    cell_dir = out / run.dirname
    mark_output_dir(cell_dir)
    assert run.experiment is not None
    save_experiment(cell_dir, run.experiment, run.records)
    # the cross-cell table says it once, and the files are named where they are published
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        md = report_experiment(
            cell_dir, run.experiment, run.records, no_plot=no_plot, status=run.status
        )
    return json.loads(md.with_suffix(".json").read_text())


def _markdown(store: Store, runs: list[CellRun], rows: list[dict], extra: list[str]) -> str:
    machines = store.conn.execute("SELECT digest, data FROM fingerprints ORDER BY digest")
    lines = [
        f"### Campaign {store.meta('name')} ({store.meta('kind')})",
        "",
        f"- spec: {store.meta('spec_path')} (digest {store.meta('spec_digest')})",
        f"- cells: {len(runs)}; pairs per cell: {store.meta('pairs')}; warm-up: "
        f"{store.meta('warmup')} trial(s) per arm before each block, on its node, discarded",
        *(f"- machine {m['digest'][:8]}: {describe(json.loads(m['data']))}" for m in machines),
        *(f"- {r.label}: {r.refused}" for r in runs if r.refused),
        "",
        table_row(
            ["Cell", "Machine", "Endpoint", "Comparison", "Effect", "95% CI", "Pairs", "Verdict"]
        ),
        table_row(["---"] * 8),
    ]
    for r in rows:
        lines.append(
            table_row(
                [
                    r["cell"],
                    (r["machine"] or "")[:8],
                    r["label"],
                    r["versus"],
                    r["effect"],
                    r["ci"],
                    str(r["pairs"]),
                    r["verdict"],
                ]
            )
        )
    return "\n".join([*lines, "", *extra]) + "\n"


def _forests(rows: list[dict], out: Path) -> None:
    for key in dict.fromkeys(r["endpoint"] for r in rows if r["comparison"] is not None):
        chosen = [r for r in rows if r["endpoint"] == key]
        labelled = [r | {"label": f"{r['cell']} · {r['versus']}"} for r in chosen]
        plots.forest(labelled, chosen[0]["label"], chosen[0]["unit"], out / f"forest_{key}.png")


def _compile_history(run: CellRun, data: dict, out: Path, no_plot: bool) -> str:
    """The cell's history plot; the markdown of its per-pass moves (with pass-profile)."""
    labels = dict((run.experiment or {}).get("labels", {}))
    if not no_plot:
        arms, panels = history.history_panels(data, labels)
        if panels:
            title = f"Compile wall per arm: {run.label}"
            plots.history(panels, arms, title, out / run.dirname / "history.png")
    return history.pass_moves(run, labels) if (run.experiment or {}).get("pass_profile") else ""


def write_report(store_path: Path, out: Path, stratify: bool, no_plot: bool) -> Path:
    """The report, built aside and published whole into ``out`` (an earlier report of ours
    there is replaced; anything else is refused before any work)."""
    store = Store.open(store_path)
    try:
        check_replaceable_dir(out, "--out")
        try:
            staging = make_staging_dir(out)
        except OSError as err:
            raise write_error(out, err) from None
        try:
            mark_output_dir(staging)
            text = _write_all(store, staging, stratify, no_plot).read_text()
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        publish_dir(staging, out)
    finally:
        store.close()
    print(text)
    print(
        f"written: {out / (SUMMARY + '.md')} and the cells' directories in {out}", file=sys.stderr
    )
    return out / f"{SUMMARY}.md"


def _write_all(store: Store, out: Path, stratify: bool, no_plot: bool) -> Path:
    kind = store.meta("kind") or ""
    chosen = json.loads(store.meta("report_endpoints") or "null")
    runs = cell_runs(store, stratify)
    rows: list[dict] = []
    extra: list[str] = []
    for run in runs:
        if run.refused is not None:
            continue
        data = _write_cell(run, out, no_plot)
        rows += cell_rows(run, data, kind, chosen)
        if kind == "compile":
            text = _compile_history(run, data, out, no_plot)
            extra += [text] if text else []
    if not no_plot:
        _forests(rows, out)
    md = out / f"{SUMMARY}.md"
    with writing(md):
        md.write_text(_markdown(store, runs, rows, extra))
    summary = {"name": store.meta("name"), "kind": kind, "rows": rows, "cells": [
        {"cell": r.label, "dir": r.dirname, "machine": r.machine, "blocks": r.blocks,
         "status": r.status, "refused": r.refused} for r in runs]}  # fmt: skip
    with writing(out / f"{SUMMARY}.json"):
        (out / f"{SUMMARY}.json").write_text(json.dumps(summary, indent=2))
    return md
