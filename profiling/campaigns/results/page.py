"""The compare page of a campaign (a store, or a `campaign report` directory): the campaign's
one analysis (analyses.py, what `campaign report` writes its files from) drawn by the compare
page's campaign views (compare/campaign.py), each cell's `ab` experiment page as its section.

``campaign_sources`` are the entries `compile-ahead compare` adds to the page's sources.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from compile_ahead.profiling.campaigns.definition.validation.arms import release_of
from compile_ahead.profiling.campaigns.execution.block import AB_DIR
from compile_ahead.profiling.campaigns.execution.fingerprint import describe
from compile_ahead.profiling.campaigns.persistence.store import Store
from compile_ahead.profiling.campaigns.results.analyses import (
    REPORT_JSON,
    CampaignAnalysis,
    CellAnalysis,
    CrossRow,
    from_report,
    from_store,
)
from compile_ahead.profiling.compare import experiment_page
from compile_ahead.profiling.compare import html as h
from compile_ahead.profiling.compare.campaign import (
    CampaignCell,
    CampaignHeader,
    CellEffect,
    Machine,
    MovedPass,
    PassMoves,
    ReleaseHistory,
    anchor_of,
    campaign_page,
)
from compile_ahead.profiling.compare.model import from_analysis
from compile_ahead.profiling.compare.sources import Page, Source
from compile_ahead.profiling.compare.svg import HistoryPoint, HistorySeries
from compile_ahead.profiling.trials.power import FLAG_RULE


def campaign_sources(stratify: bool = False) -> tuple[Source, ...]:
    """A campaign store (any file: the store says in one line if it is none) and a `campaign
    report` directory; ``stratify``: a store's cells per machine, as `campaign report
    --stratify`."""
    return (
        Source("a campaign", "the store file", lambda path: store_page(path, stratify),
               Path.is_file),
        Source("`campaign report` output", REPORT_JSON, lambda path: render(from_report(path))),
    )  # fmt: skip


def store_page(path: Path, stratify: bool = False) -> Page:
    store = Store.open(path)
    try:
        campaign = from_store(store, stratify)
    finally:
        store.close()
    return render(campaign)


def render(campaign: CampaignAnalysis) -> Page:
    d = campaign.design
    title = f"Campaign {d.name} ({d.kind})"
    cells: list[CampaignCell] = []
    traces: dict[str, Path] = {}
    for cell in campaign.cells:
        view, found = _cell(campaign, cell)
        cells.append(view)
        traces |= found
    releases = [release_of(str(a)) for a in d.spec_table("campaign").get("arms", [])]
    history_title = "Release history" if releases and all(releases) else "Compile wall per arm"
    html = campaign_page(
        _header(campaign, title, cells),
        cells,
        list(_histories(campaign)),
        list(_moves(campaign)),
        history_title,
    )
    return Page(title, html, traces)


def _effect(r: CrossRow) -> CellEffect:
    s = r.summary
    return CellEffect(
        r.endpoint, r.label, r.versus, r.unit,
        None if s is None else s.mean_diff, None if s is None else s.percent,
        None if s is None else s.ci_low, None if s is None else s.ci_high,
        r.pairs, r.verdict, r.flagged,
        None if s is None else s.mde_pct, None if s is None else s.control_mean, r.count,
    )  # fmt: skip


def _state(campaign: CampaignAnalysis, cell: CellAnalysis) -> str:
    if cell.refused is not None:
        return f"not analysed: {cell.refused}"
    done = f"{cell.run.blocks} of {campaign.design.pairs} blocks done"
    return done + (" (PARTIAL)" if cell.run.status else "")


def _cell(campaign: CampaignAnalysis, cell: CellAnalysis) -> tuple[CampaignCell, dict[str, Path]]:
    """The cell's row data and section (its `ab` experiment page), and its trace links."""
    d, run = campaign.design, cell.run
    anchor = anchor_of(run.dirname)
    failed = [f.text() for f in d.failures if f.cell == run.index]
    view = CampaignCell(run.dirname, run.label, tuple(_effect(r) for r in cell.rows),
                        machine=(run.machine or "")[:8], state=_state(campaign, cell))  # fmt: skip
    if cell.done is None or run.experiment is None:
        section = h.banners([f"Not analysed: {cell.refused}", *failed], "error")
        return _with_section(view, section), {}
    source = Path(d.source)
    dirs = [source / run.dirname, *(Path(w) / AB_DIR for w in run.workdirs)]
    page = from_analysis(run.experiment, run.records, cell.done, source, dirs, failed,
                         link_prefix=f"{anchor}-")  # fmt: skip
    page.design.rerun = cell.rerun
    page.design.fingerprint = d.fingerprints.get(run.machine or "")
    return _with_section(view, experiment_page.body(page, anchor=f"{anchor}-")), page.traces


def _with_section(view: CampaignCell, section: str) -> CampaignCell:
    return CampaignCell(view.cell_id, view.label, view.effects, section, view.machine, view.state)


def _builds(campaign: CampaignAnalysis) -> str:
    """Each arm's OpenVINO build(s), over every machine a block ran on."""
    builds: dict[str, set[str]] = {}
    for data in campaign.design.fingerprints.values():
        for arm, build in (data.get("openvino") or {}).items():
            builds.setdefault(arm, set()).add(str(build))
    return "; ".join(f"{arm}: {', '.join(sorted(b))}" for arm, b in builds.items()) or h.DASH


def _facts(campaign: CampaignAnalysis) -> dict[str, str]:
    d = campaign.design
    axes = d.spec_table("axes")
    arms = d.spec_table("campaign").get("arms", [])
    analysed = sum(1 for c in campaign.cells if c.done is not None)
    return {
        "spec": f"{d.spec_path} (digest {d.spec_digest})",
        "experiment": f"`ab {d.kind}` per cell",
        "arms": ", ".join(map(str, arms)) or h.DASH,
        "OpenVINO builds per arm": _builds(campaign),
        "axes": "; ".join(f"{k}: {' | '.join(map(str, v))}" for k, v in axes.items()) or h.DASH,
        "cells": f"{len(campaign.cells)} shown, {analysed} analysed",
        "pairs per cell": f"{d.pairs} blocks, one pair each",
        "warm-up": f"{d.warmup} trial(s) per arm before each block, on its node, discarded",
        "machines": "each machine's blocks apart (stratified)"
        if d.stratify
        else "a cell is pooled only when its blocks ran on one machine fingerprint",
        "verdict": f"the trials' judgement: {FLAG_RULE}; else the part of the rule it fails",
        "read from": d.source,
    }


def _header(campaign: CampaignAnalysis, title: str, cells: list[CampaignCell]) -> CampaignHeader:
    d = campaign.design
    machines = tuple(
        Machine(digest, describe(data),
                tuple(c.run.label for c in campaign.cells if c.run.machine == digest))
        for digest, data in d.fingerprints.items()
    )  # fmt: skip
    notices = [f.text() for f in d.failures]
    notices += [f"cell {c.run.label}: not analysed: {c.refused}" for c in campaign.cells
                if c.refused is not None]  # fmt: skip
    if not any(c.done is not None for c in campaign.cells):
        notices.append(
            "No cell of this campaign has a block done: nothing to compare yet (`campaign run "
            "SPEC --store STORE` runs them; `campaign status STORE` says where it is)."
        )
    return CampaignHeader(title, d.source, _facts(campaign), d.spec_text, machines, tuple(notices))


def _histories(campaign: CampaignAnalysis) -> Iterator[ReleaseHistory]:
    """Per compile-wall endpoint (rung, all rungs): a line per cell across the arms."""
    analysed = [c for c in campaign.cells if c.walls and c.done is not None]
    if not analysed:
        return
    keys: dict[str, tuple[str, str]] = {}
    for c in analysed:
        for panel in c.walls:
            keys.setdefault(panel.key, (panel.label, panel.unit))
    for key, (label, unit) in keys.items():
        series = []
        releases: dict[str, None] = {}
        for c in analysed:
            arms = c.done.analysis.plan.arms  # type: ignore[union-attr]
            releases |= dict.fromkeys(arms)
            for panel in (p for p in c.walls if p.key == key):
                pairs = zip(arms, panel.points, strict=True)
                points = tuple(HistoryPoint(arm, *point) for arm, point in pairs if point)
                series.append(HistorySeries(c.run.label, points, f"#{anchor_of(c.run.dirname)}"))
        yield ReleaseHistory(label, unit, tuple(releases), tuple(series))


def _moves(campaign: CampaignAnalysis) -> Iterator[PassMoves]:
    """Per cell and consecutive pair of arms, the passes that moved most, with their verdict."""
    for c in campaign.cells:
        for move in c.moves:
            passes = tuple(
                MovedPass(r.key.name, r.key.manager, r.summary.control_mean,
                          r.summary.treatment_mean, r.summary.mean_diff, r.summary.ci_low,
                          r.summary.ci_high, r.summary.percent, move.status(r), move.flagged(r))
                for r in move.top()
            )  # fmt: skip
            yield PassMoves(c.run.dirname, c.run.label, move.before, move.after, passes)
