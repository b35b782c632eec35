"""The compare page of an `ab` experiment: summary, design, endpoints, per-pass diff, trials.

``body`` renders one experiment with every id under an anchor prefix, so a campaign page can
hold one per cell; ``render`` makes it a whole page.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from compile_ahead.profiling.compare import html as h
from compile_ahead.profiling.compare import model as m
from compile_ahead.profiling.compare.calibration_section import calibration
from compile_ahead.profiling.compare.html import Cell, Column, Row
from compile_ahead.profiling.compare.judged_cells import (
    judged_cells,
    judged_columns,
    mde_cell,
    strip_of,
)
from compile_ahead.profiling.compare.pass_section import passes
from compile_ahead.profiling.compare.summary import FlagTally, mde_range, summarise
from compile_ahead.profiling.trials.compile_kind.passes import PASS_FLAG_RULE
from compile_ahead.profiling.trials.report import display_unit, fmt_number
from compile_ahead.profiling.trials.stats import MDE_POWER

RULE = (
    f"Flagged (regression, improvement) as in the markdown and JSON reports: {PASS_FLAG_RULE}. "
    "Effect, interval and noise floor are percent changes of the treatment over the control "
    "(the geometric mean of the per-pair ratios, with the paired-t 95% interval of their "
    "logs). Noise floor: the half-width of that interval in the A/A arm's comparison (the "
    "control run again, `ab compile --aa`) where the experiment has one, else in the "
    "comparison's own; a change below the floor is never flagged, whatever its p. MDE: the "
    f"smallest change the paired t-test on the logs detects with {MDE_POWER:.0%} power at the "
    "95% level with these pairs: a change larger than it would have been seen. p: the exact "
    "two-sided sign-flip p of the differences; Holm p: the paired-t p on the logs after "
    "Holm's correction over the table."
)


def render(page: m.ExperimentPage) -> str:
    return h.document(page.title, body(page))


def body(page: m.ExperimentPage, anchor: str = "") -> str:
    parts = [
        f"<h1>{escape(page.title)}</h1>",
        f'<p class="muted">{escape(str(page.directory.resolve()))}</p>',
        h.banners([page.status] if page.status else []),
        h.banners([f"CALIBRATION: {page.calibration.label}"] if page.calibration else []),
        h.banners(page.notices, "error"),
        summary(page, anchor),
        design(page, anchor),
    ]
    if page.calibration is not None:
        parts.append(calibration(page.calibration, anchor))
    for c in page.comparisons:
        parts.append(endpoints(page, c, anchor))
    if page.counts:
        parts.append(counts(page, anchor))
    for c in page.comparisons:
        if c.passes is not None:
            parts.append(passes(page, c, anchor))
    if page.design.kind == "compile" and all(c.passes is None for c in page.comparisons):
        parts.append('<p class="note">No per-pass diff: the trials ran without --pass-profile.</p>')
    parts += [trials(page, anchor), f'<h2>How to read this page</h2><p class="note">{RULE}</p>']
    return "\n".join(parts)


def _tally(t: FlagTally) -> Cell:
    if t.count == 0:
        return Cell('<span class="count">0</span>', 0, True)
    largest = (
        h.percent(t.largest_percent)
        if t.largest_percent is not None
        else h.signed(t.largest_diff, t.unit)
    )
    html = (
        f'<span class="count">{t.count}</span> · mean {h.percent(t.mean_percent)} · largest '
        f"{escape(largest)} ({escape(t.largest or '')})"
    )
    return Cell(html, t.count, True)


def _comparison_name(c: m.Comparison, control: str) -> str:
    tag = " (A/A)" if c.is_aa else " (CALIBRATION)" if c.calibration else ""
    return f"{c.treatment} vs {control}{tag}"


def summary(page: m.ExperimentPage, anchor: str) -> str:
    control = page.design.control
    names = {c.treatment: _comparison_name(c, control) for c in page.comparisons}
    rows = [
        Row(
            [
                h.text(names[r.treatment]),
                h.text(r.scope),
                _tally(r.regressions),
                _tally(r.improvements),
            ],
            {"data-treatment": r.treatment, "data-scope": r.scope},
        )
        for r in summarise(page.comparisons)
    ]
    cols = [Column("Comparison"), Column("Of"), Column("Regressions", True),
            Column("Improvements", True)]  # fmt: skip
    flagged = [
        f"<li>{escape(names[c.treatment])}: {escape(e.label)} "
        f"{escape(h.percent(e.judged.summary.effect_pct))} "
        f"({escape(h.signed(e.judged.summary.mean_diff, e.unit))}), "
        f'<span class="{e.judged.css}">{escape(e.judged.status)}</span></li>'
        for c in page.comparisons
        for e in c.endpoints
        if e.judged.flagged and e.judged.summary is not None
    ]
    return (
        f'<h2 id="{anchor}summary">Summary</h2>'
        + _headline(page, names)
        + h.table(cols, rows, f"{anchor}summary-table", sortable=False)
        + (f"<ul>{''.join(flagged)}</ul>" if flagged
           else '<p class="note">No endpoint flagged.</p>')
        + "".join(f'<p class="note seen">{escape(n)}</p>' for n in _seen_notes(page))
    )  # fmt: skip


def _headline(page: m.ExperimentPage, names: dict[str, str]) -> str:
    """The default endpoint, why it is that one, and its verdict in each comparison."""
    if page.headline is None:
        return ""
    key, rule = page.headline
    label, verdicts = key, []
    for c in page.comparisons:
        row = next((e for e in c.endpoints if e.key == key), None)
        if row is None:
            continue
        label, s = row.label, row.judged.summary
        change = "" if s is None else f"{h.percent(s.effect_pct)}, "
        verdicts.append(
            f'{escape(names[c.treatment])}: {escape(change)}<span class="{row.judged.css}">'
            f"{escape(row.judged.status)}</span>"
        )
    return (
        f'<p class="headline">Default endpoint: <strong>{escape(label)}</strong> '
        f"({escape(rule)}). {'; '.join(verdicts)}</p>"
    )


def _seen_notes(page: m.ExperimentPage) -> list[str]:
    """Per comparison, the range of changes its endpoints could have seen; the A/A note."""
    control = page.design.control
    notes = []
    for c in page.comparisons:
        seen = mde_range(c)
        if seen is None:
            continue
        (low_ep, low), (high_ep, high) = seen.smallest, seen.largest
        notes.append(
            f"{c.treatment} vs {control}: a change larger than \u00b1{fmt_number(low)}% "
            f"({low_ep}) to \u00b1{fmt_number(high)}% ({high_ep}) would have been seen "
            f"({MDE_POWER:.0%} power, {seen.pairs} pairs; each endpoint's in its MDE column)."
        )
    if page.aa_arms:
        notes.append(
            f"A/A: {', '.join(page.aa_arms)} ran the control again (`ab compile --aa`), so "
            "anything flagged there is noise, and its interval sets the other comparisons' "
            "noise floor."
        )
    elif page.design.kind == "compile":
        notes.append(
            "No A/A arm (`ab compile --aa` runs one): each comparison's noise floor is its own "
            "interval's half-width."
        )
    return notes


def design(page: m.ExperimentPage, anchor: str) -> str:
    d = page.design
    arm_rows = [
        Row(
            [
                h.text(a.name),
                h.text(a.label),
                Cell("; ".join(f"{escape(k)}: {escape(v)}" for k, v in a.facts.items())),
                h.number(a.measured, str(a.measured)),
                h.number(a.failed, str(a.failed)),
            ]
        )
        for a in page.arms
    ]
    arms = h.table(
        [
            Column("Arm"),
            Column("Label"),
            Column("What it runs"),
            Column("Measured", True),
            Column("Failed", True),
        ],
        arm_rows,
        sortable=False,
    )
    balance = (
        f"position balanced: {'yes' if d.position_balanced else 'no'}, carry-over balanced: "
        f"{'yes' if d.carryover_balanced else 'no'}"
    )
    items = {
        "control": d.control,
        "pairs": f"{d.pairs} blocks, {d.order}: {', '.join('/'.join(b) for b in d.blocks)}",
        "balance": balance,
        "warm-up": f"{d.warmup} trial(s) per arm, discarded; one fresh process per trial",
        **d.context,
        "machine": ", ".join(f"{k}={v}" for k, v in d.fingerprint.items())
        if d.fingerprint
        else "no fingerprint recorded by this experiment",
    }
    if d.pooled_from:
        items["pooled from"] = ", ".join(d.pooled_from)
    rerun = (
        f"<pre><code>{escape(d.rerun)}</code></pre>"
        if d.rerun
        else '<p class="note">The command line was not recorded by this run; each arm\'s trial '
        "command is below.</p>"
    )
    commands = "".join(
        f"<p>{escape(a.name)}:</p><pre><code>{escape(a.trial_command)}</code></pre>"
        for a in page.arms
    )
    return (
        f'<h2 id="{anchor}design">Design</h2>{arms}{h.facts(items)}'
        f"<h3>Rerun locally</h3>{rerun}"
        f"<details><summary>Each arm's trial command ({{out}}: the trial's result file)"
        f"</summary>{commands}</details>"
    )


def endpoints(page: m.ExperimentPage, c: m.Comparison, anchor: str) -> str:
    control = page.design.control
    rows = []
    for e in c.endpoints:
        shown, div = display_unit(e.unit)
        mean = [
            sum(p[i] for p in e.pairs) / len(e.pairs) / div if e.pairs else None for i in (0, 1)
        ]
        cells = [
            h.text(f"{e.label} ({shown})"),
            h.number(mean[0]),
            h.number(mean[1]),
            *judged_cells(e.judged, e.unit),
            mde_cell(e.judged.summary),
            h.number(len(e.pairs), str(len(e.pairs))),
            Cell(strip_of(e.pairs, e.judged, e.unit)),
        ]
        rows.append(Row(cells, {"class": e.judged.css, "data-key": e.key}))
    mde_title = (
        f"minimal detectable effect: a change larger than this would have been seen "
        f"({MDE_POWER:.0%} power, 95% level, these pairs)"
    )
    cols = [
        Column("Endpoint"),
        Column(f"{control} mean", True),
        Column(f"{c.treatment} mean", True),
        *judged_columns(control, c.treatment, ""),
        Column("MDE", True, mde_title),
        Column("Pairs", True),
        Column("Per pair", False, "change per pair; bar: 95% CI; shaded: within the noise floor"),
    ]
    sources = [e.judged.judgement.floor_source for e in c.endpoints if e.judged.judgement]
    floor_from = max(set(sources), key=sources.count) if sources else "nothing (no pairs)"
    what = (
        f" ({c.calibration})" if c.calibration else " (A/A: the control again)" if c.is_aa else ""
    )
    return (
        f'<h2 id="{anchor}endpoints-{escape(c.treatment)}">Endpoints: {escape(c.treatment)} vs '
        f"{escape(control)}{escape(what)}</h2>"
        f'<p class="note">Noise floor from {escape(floor_from)}.</p>'
        + h.table(cols, rows, f"{anchor}endpoints-{c.treatment}-table")
    )


def counts(page: m.ExperimentPage, anchor: str) -> str:
    """Count-style rows (boundaries ready, top-1 agreement with the control): per arm, as the
    markdown report gives them, without a test."""
    arms = [a.name for a in page.arms]
    rows = [
        Row([h.text(t.label), *(h.text(t.per_arm.get(a, h.DASH)) for a in arms)])
        for t in page.counts
    ]
    cols = [Column("Count"), *(Column(a) for a in arms)]
    return f'<h2 id="{anchor}counts">Counts</h2>' + h.table(cols, rows, sortable=False)


def trace_link(name: str | None, path: Path | None) -> Cell:
    if name is None or path is None:
        return Cell(h.DASH, "")
    return Cell(
        f'<a class="trace" href="trace/{escape(name)}" target="_blank" rel="noopener">open in '
        f'Perfetto</a> <code class="muted">{escape(str(path))}</code>',
        name,
    )


def trials(page: m.ExperimentPage, anchor: str) -> str:
    rows = [
        Row(
            [
                h.number(t.index, str(t.index)),
                h.text("warm-up" if t.warmup else str(t.block)),
                h.text(t.arm),
                h.number(t.wall_s),
                h.text(
                    "ok" if t.error is None else f"FAILED: {t.error}",
                    "" if t.error is None else "status",
                ),
                trace_link(t.trace, page.traces.get(t.trace or "")),
            ],
            {"class": "" if t.error is None else "regression"},
        )
        for t in page.trials
    ]
    cols = [
        Column("#", True),
        Column("Block"),
        Column("Arm"),
        Column("Wall s", True),
        Column("Result"),
        Column("Trace"),
    ]
    hint = server_hint(page.directory) if page.traces else ""
    return f'<h2 id="{anchor}trials">Trials ({len(rows)})</h2>{hint}' + h.table(
        cols, rows, f"{anchor}trials-table"
    )


def server_hint(directory: Path) -> str:
    """Shown (by the page's script) only where the page was opened as a file: trace links
    need the local server."""
    command = f"compile-ahead compare {directory.resolve()} --open"
    return (
        f'<p class="banner server-hint" id="server-hint">Trace links open in the Perfetto UI '
        f"through the local server; start it with <code>{escape(command)}</code> (or open one "
        "trace with <code>compile-ahead trace open FILE</code>).</p>"
    )
