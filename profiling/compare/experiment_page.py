"""The compare page of an `ab` experiment: summary, design, endpoints, per-pass diff, trials.

``body`` renders one experiment with every id under an anchor prefix, so a campaign page can
hold one per cell; ``render`` makes it a whole page.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from compile_ahead.profiling.compare import html as h
from compile_ahead.profiling.compare import model as m
from compile_ahead.profiling.compare import svg
from compile_ahead.profiling.compare.html import Cell, Column, Row
from compile_ahead.profiling.compare.summary import FlagTally, summarise
from compile_ahead.profiling.trials.report import display_unit, fmt_number

RULE = (
    "Flagged (regression, improvement): the paired-t 95% interval of the change excludes 0 and "
    "the change is at least the noise floor. Noise floor: the minimal detectable effect at the "
    "comparison's pair count n (95% level, 80% power), (t(0.975, n−1) + t(0.8, n−1)) · sd / √n, "
    "with sd the spread of the paired differences of an A/A arm (the control run again) where "
    "the experiment has one, else of the comparison's own pairs; a pass's sd is held at least "
    "at the typical relative spread of all passes. A change below the floor is never flagged, "
    "whatever its p."
)


def render(page: m.ExperimentPage) -> str:
    return h.document(page.title, body(page))


def body(page: m.ExperimentPage, anchor: str = "") -> str:
    parts = [
        f"<h1>{escape(page.title)}</h1>",
        f'<p class="muted">{escape(str(page.directory.resolve()))}</p>',
        h.banners([page.status] if page.status else []),
        h.banners(page.notices, "error"),
        summary(page, anchor),
        design(page, anchor),
    ]
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


def summary(page: m.ExperimentPage, anchor: str) -> str:
    control = page.design.control
    aa = {c.treatment for c in page.comparisons if c.is_aa}
    rows = [
        Row(
            [
                h.text(f"{r.treatment} vs {control}" + (" (A/A)" if r.treatment in aa else "")),
                h.text(r.scope),
                _tally(r.regressions),
                _tally(r.improvements),
            ],
            {"data-treatment": r.treatment, "data-scope": r.scope},
        )
        for r in summarise(page.comparisons)
    ]
    cols = [
        Column("Comparison"),
        Column("Of"),
        Column("Regressions", True),
        Column("Improvements", True),
    ]
    flagged = [
        f"<li>{escape(c.treatment)} vs {escape(control)}: {escape(e.label)} "
        f"{escape(h.signed(e.judged.summary.mean_diff, e.unit))} "
        f"({escape(h.percent(e.judged.summary.percent))}), "
        f'<span class="{e.judged.status.css}">{e.judged.status.value}</span></li>'
        for c in page.comparisons
        for e in c.endpoints
        if e.judged.status.flagged and e.judged.summary is not None
    ]
    notes = []
    if aa:
        notes.append(
            f"A/A: {', '.join(sorted(aa))} ran exactly the control's trial, so anything flagged "
            "there is noise (the false positives to expect), and its spread sets the other "
            "comparisons' noise floor."
        )
    return (
        f'<h2 id="{anchor}summary">Summary</h2>'
        + h.table(cols, rows, f"{anchor}summary-table", sortable=False)
        + (
            f"<ul>{''.join(flagged)}</ul>"
            if flagged
            else '<p class="note">No endpoint flagged.</p>'
        )
        + "".join(f'<p class="note">{escape(n)}</p>' for n in notes)
    )


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


def strip_of(pairs: tuple[m.Pair, ...], judged: m.Judged, unit: str) -> str:
    _, div = display_unit(unit)
    s, floor = judged.summary, judged.floor.value
    ci = None
    if s is not None and s.ci_low is not None and s.ci_high is not None:
        ci = (s.ci_low / div, s.ci_high / div)
    lines = [f"{fmt_number(a / div)} → {fmt_number(b / div)}" for a, b in pairs]
    return svg.strip(
        [(b - a) / div for a, b in pairs],
        ci,
        None if floor is None else floor / div,
        judged.status.css,
        "per pair (control → treatment): " + "; ".join(lines),
    )


def _judged_cells(j: m.Judged, unit: str) -> list[Cell]:
    """Δ, Δ%, interval, p, floor, status: the columns every comparison row shares."""
    s = j.summary
    _, div = display_unit(unit)
    return [
        h.number(
            None if s is None else s.mean_diff / div,
            None if s is None else h.signed(s.mean_diff, unit),
        ),
        h.number(None if s is None else s.percent, None if s is None else h.percent(s.percent)),
        Cell(
            escape(h.interval(s.ci_low, s.ci_high, unit)) if s else h.DASH,
            None if s is None or s.ci_low is None else s.ci_low / div,
            True,
            "n",
        ),
        h.number(
            None if s is None else s.sign_flip_p, None if s is None else h.p_value(s.sign_flip_p)
        ),
        h.number(
            None if j.floor.value is None else j.floor.value / div,
            None if j.floor.value is None else fmt_number(j.floor.value / div),
        ),
        Cell(escape(j.status.value), j.status.value, css="status"),
    ]


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
            *_judged_cells(e.judged, e.unit),
            h.number(len(e.pairs), str(len(e.pairs))),
            Cell(strip_of(e.pairs, e.judged, e.unit)),
        ]
        rows.append(Row(cells, {"class": e.judged.status.css, "data-key": e.key}))
    cols = [
        Column("Endpoint"),
        Column(f"{control} mean", True),
        Column(f"{c.treatment} mean", True),
        Column("Δ", True, f"{c.treatment} − {control}, mean of the paired differences"),
        Column("Δ %", True, "of the control's mean"),
        Column("95% CI", True, "paired-t"),
        Column("p", True, "exact two-sided sign-flip"),
        Column("Noise floor", True),
        Column("Verdict"),
        Column("Pairs", True),
        Column("Per pair", False, "differences; bar: 95% CI; shaded: within the noise floor"),
    ]
    floor_from = next((e.judged.floor.source for e in c.endpoints if e.judged.summary), "")
    return (
        f'<h2 id="{anchor}endpoints-{escape(c.treatment)}">Endpoints: {escape(c.treatment)} vs '
        f"{escape(control)}</h2>"
        f'<p class="note">Noise floor from {escape(floor_from or "nothing (no pairs)")}.</p>'
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


def passes(page: m.ExperimentPage, c: m.Comparison, anchor: str) -> str:
    control, t = page.design.control, c.treatment
    rows = [_pass_row(p) for p in c.passes or []]
    cols = [
        Column("Pass"),
        Column("Manager"),
        Column(f"self {control} ms", True),
        Column(f"self {t} ms", True),
        Column("Δ ms", True),
        Column("Δ %", True),
        Column("95% CI ms", True),
        Column("p", True),
        Column("Noise floor ms", True),
        Column("Status"),
        Column(f"calls {control}", True),
        Column(f"calls {t}", True),
        Column("Δ calls", True),
        Column("Share", True, f"of {t}'s compile wall"),
        Column("Per pair", False, "self-time differences; bar: 95% CI; shaded: noise floor"),
    ]
    ident = f"{anchor}passes-{t}-table"
    flagged = sum(1 for p in c.passes or [] if p.judged.status.flagged)
    only = _one_arm_only(c, f"{anchor}passes-{t}-only")
    return (
        f'<h2 id="{anchor}passes-{escape(t)}">Passes: {escape(t)} vs {escape(control)}</h2>'
        f'<p class="note">Self time per pass (its duration minus the pass managers it ran, '
        f"summed over its runs and the rungs of a trial), mean per trial; {len(rows)} passes in "
        f"both arms, {flagged} flagged. Ranked as the markdown report ranks them; click a "
        "column to sort.</p>"
        + h.filters(ident, len(rows), flagged=True, what="passes")
        + h.table(cols, rows, ident)
        + only
    )


def _pass_row(p: m.PassRow) -> Row:
    share = None if p.share is None else p.share * 100
    cells = [
        h.text(p.name),
        h.text(p.manager),
        h.number(p.self_ms[0]),
        h.number(p.self_ms[1]),
        *_judged_cells(p.judged, "ms"),
        h.number(p.calls[0], _count(p.calls[0])),
        h.number(p.calls[1], _count(p.calls[1])),
        h.number(p.calls_delta, _count(p.calls_delta, signed=True)),
        h.number(share, None if share is None else f"{fmt_number(share)}%"),
        Cell(strip_of(p.pairs, p.judged, "ms")),
    ]
    attrs = {
        "class": p.judged.status.css,
        "data-name": f"{p.name} {p.manager}".lower(),
        "data-flagged": "1" if p.judged.status.flagged else "0",
    }
    return Row(cells, attrs)


def _count(value: float | None, signed: bool = False) -> str | None:
    """A mean count per trial: whole numbers without decimals."""
    if value is None:
        return None
    text = f"{value:+.4g}" if signed and value != 0 else f"{value:.4g}"
    return text.replace("-", "\u2212")


def _one_arm_only(c: m.Comparison, ident: str) -> str:
    if not c.one_arm_only:
        return '<p class="note">No pass ran in one arm only.</p>'
    rows = [
        Row(
            [
                h.text(o.name),
                h.text(o.manager),
                h.text(o.arm),
                h.number(o.mean_ms),
                h.number(o.calls, _count(o.calls)),
            ],
            {"data-name": f"{o.name} {o.manager}".lower()},
        )
        for o in sorted(c.one_arm_only, key=lambda o: -(o.mean_ms or 0.0))
    ]
    cols = [
        Column("Pass"),
        Column("Manager"),
        Column("Only in"),
        Column("mean self ms", True),
        Column("calls", True),
    ]
    return (
        f"<h3>Passes that ran in one arm only ({len(rows)})</h3>"
        '<p class="note">No paired effect: mean self time and calls per trial in the arm that '
        "ran them.</p>" + h.table(cols, rows, ident)
    )


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
