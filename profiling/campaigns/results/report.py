"""`campaign report`: per cell the files `ab report` writes for it (its directory holds the
cell's experiment.json and trials.jsonl, so `compile-ahead ab report CELL_DIR` rebuilds them),
across cells one table (cell, endpoint, effect, CI, pairs, MDE, verdict) with a forest plot per
endpoint, and the compare page (compare.html) of it all: every part from the one analysis of
the campaign (analyses.py), so the table says exactly what each cell's report says.

The table's endpoints: for schedule campaigns the seed's (foreground compile, critical path,
decode, boundary waits, and top-1 agreement as a count); for compile campaigns the compile wall
per rung and in all, compile CPU time, instructions and pass self time where they were measured;
or the spec's own list. Its verdict is the trials' judgement (trials.power).
Compile campaigns also get history.py's plots and per-pass moves.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
from pathlib import Path

from compile_ahead.errors import write_error
from compile_ahead.output.atomic import write_bytes_atomic, writing
from compile_ahead.output.checks import check_replaceable_dir, mark_output_dir
from compile_ahead.output.dirs import make_staging_dir, publish_dir
from compile_ahead.output.format_version import stamped
from compile_ahead.profiling.campaigns.execution.fingerprint import describe
from compile_ahead.profiling.campaigns.persistence.store import Store
from compile_ahead.profiling.campaigns.results import history, plots
from compile_ahead.profiling.campaigns.results.analyses import (
    REPORT_JSON,
    CampaignAnalysis,
    CellAnalysis,
    CrossRow,
    cells_json,
    from_store,
)
from compile_ahead.profiling.campaigns.results.page import render
from compile_ahead.profiling.compare.sources import PAGE_NAME
from compile_ahead.profiling.trials.experiment import save_experiment, write_analysis
from compile_ahead.profiling.trials.report import fmt_number, table_row
from compile_ahead.shown_text import shown

SUMMARY = REPORT_JSON.removesuffix(".json")


def _write_cell(cell: CellAnalysis, out: Path, no_plot: bool) -> None:
    """The cell's directory as `ab report` leaves one (and its history plot)."""
    run, done = cell.run, cell.done
    assert run.experiment is not None and done is not None
    cell_dir = out / run.dirname
    mark_output_dir(cell_dir)
    save_experiment(cell_dir, run.experiment, run.records)
    # the cross-cell table says it once, and the files are named where they are published
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        write_analysis(cell_dir, done, run.records, no_plot=no_plot, echo=False)
    if not no_plot and cell.walls:
        arms = [done.labels.get(a, a) for a in done.analysis.plan.arms]
        title = f"Compile wall per arm: {run.label}"
        plots.history(cell.walls, arms, title, cell_dir / "history.png")


def _mde(row: CrossRow) -> str:
    s = row.summary
    return "\u2014" if s is None or s.mde_pct is None else f"\u00b1{fmt_number(s.mde_pct)}%"


def _markdown(campaign: CampaignAnalysis) -> str:
    d = campaign.design
    header = ["Cell", "Machine", "Endpoint", "Comparison", "Effect", "95% CI", "Pairs", "MDE",
              "Verdict"]  # fmt: skip
    lines = [
        f"### Campaign {d.name} ({d.kind})",
        "",
        f"- spec: {d.spec_path} (digest {d.spec_digest})",
        f"- cells: {len(campaign.cells)}; pairs per cell: {d.pairs}; warm-up: "
        f"{d.warmup} trial(s) per arm before each block, on its node, discarded",
        *(f"- machine {digest[:8]}: {describe(data)}" for digest, data in d.fingerprints.items()),
        *(f"- {c.run.label}: {c.refused}" for c in campaign.cells if c.refused),
        *(f"- {f.text()}" for f in d.failures),
        "- verdict: the trials' judgement (interval excludes 0, significant after Holm's "
        "correction over the cell's endpoints, larger than the noise floor), or the part of "
        "that rule a change fails",
        "",
        table_row(header),
        table_row(["---"] * len(header)),
    ]
    for r in campaign.rows:
        effect, ci = r.texts()
        cells = [r.cell, (r.machine or "")[:8], r.label, r.versus, effect, ci, str(r.pairs),
                 _mde(r), r.verdict]  # fmt: skip
        lines.append(table_row(cells))
    lines = [shown(line) for line in lines]  # names from the store print as one line each
    moves = [
        history.moves_markdown(shown(c.run.label), c.moves, c.done.labels)
        for c in campaign.cells
        if c.moves and c.done is not None
    ]
    return "\n".join([*lines, "", *moves]) + "\n"


def _forests(rows: list[CrossRow], out: Path) -> None:
    for key in dict.fromkeys(r.endpoint for r in rows if r.summary is not None):
        chosen = [r for r in rows if r.endpoint == key and r.summary is not None]
        labelled = [(f"{r.cell} · {r.versus}", r.summary) for r in chosen if r.summary]
        plots.forest(labelled, chosen[0].label, chosen[0].unit, out / f"forest_{key}.png")


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
        f"written: {out / (SUMMARY + '.md')}, {out / PAGE_NAME} and the cells' directories in "
        f"{out}",
        file=sys.stderr,
    )
    return out / f"{SUMMARY}.md"


def _write_all(store: Store, out: Path, stratify: bool, no_plot: bool) -> Path:
    campaign = from_store(store, stratify)
    for cell in campaign.cells:
        if cell.done is not None:
            _write_cell(cell, out, no_plot)
    if not no_plot:
        _forests(campaign.rows, out)
    md = out / f"{SUMMARY}.md"
    with writing(md):
        md.write_text(_markdown(campaign))
    d = campaign.design
    summary = stamped(
        {
            "name": d.name,
            "kind": d.kind,
            "design": d.to_dict(),
            "rows": [r.to_dict() for r in campaign.rows],
            "cells": cells_json(campaign),
        }
    )
    with writing(out / REPORT_JSON):
        (out / REPORT_JSON).write_text(json.dumps(summary, indent=2, allow_nan=False))
    write_bytes_atomic(out / PAGE_NAME, render(campaign).html.encode())
    return md
