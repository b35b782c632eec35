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
from compile_ahead.profiling.compare.summary import FlagTally, mde_range, summarise
from compile_ahead.profiling.trials.compile_kind.passes import PASS_FLAG_RULE
from compile_ahead.profiling.trials.report import display_unit, fmt_number
from compile_ahead.profiling.trials.stats import MDE_POWER, PairedSummary

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


def strip_of(pairs: tuple[m.Pair, ...], judged: m.Judged, unit: str) -> str:
    """The per-pair changes in percent, the ratio's interval and the floor's band (what the
    rule reads); in the endpoint's unit, without a band, where a value is not positive."""
    s, j = judged.summary, judged.judgement
    lines = "; ".join(f"{fmt_number(a)} → {fmt_number(b)}" for a, b in pairs)
    if s is not None and all(a > 0 and b > 0 for a, b in pairs):
        ci = None
        if s.ratio_ci_low is not None and s.ratio_ci_high is not None:
            ci = ((s.ratio_ci_low - 1) * 100, (s.ratio_ci_high - 1) * 100)
        band = None
        if j is not None and j.floor_pct is not None:
            band = ((1 / (1 + j.floor_pct / 100) - 1) * 100, j.floor_pct)
        changes = [(b / a - 1) * 100 for a, b in pairs]
        title = f"per pair, change in % (control → treatment: {lines})"
        return svg.strip(changes, ci, band, judged.css, title)
    _, div = display_unit(unit)
    ci = None
    if s is not None and s.ci_low is not None and s.ci_high is not None:
        ci = (s.ci_low / div, s.ci_high / div)
    title = f"per pair, difference (control → treatment: {lines})"
    return svg.strip([(b - a) / div for a, b in pairs], ci, None, judged.css, title)


def _pct_interval(s: PairedSummary | None) -> Cell:
    if s is None or s.ratio_ci_low is None or s.ratio_ci_high is None:
        return Cell(h.DASH, None, True, "n")
    low, high = (s.ratio_ci_low - 1) * 100, (s.ratio_ci_high - 1) * 100
    return Cell(escape(f"{h.percent(low)} to {h.percent(high)}"), low, True, "n")


def _judged_cells(j: m.Judged, unit: str) -> list[Cell]:
    """Δ, effect %, interval, p, Holm p, floor, status: the columns every comparison row
    shares."""
    s, judgement = j.summary, j.judgement
    _, div = display_unit(unit)
    floor = None if judgement is None else judgement.floor_pct
    holm = None if judgement is None else judgement.holm_p
    return [
        h.number(
            None if s is None else s.mean_diff / div,
            None if s is None else h.signed(s.mean_diff, unit),
        ),
        h.number(None if s is None else s.effect_pct,
                 None if s is None else h.percent(s.effect_pct)),
        _pct_interval(s),
        h.number(
            None if s is None else s.sign_flip_p, None if s is None else h.p_value(s.sign_flip_p)
        ),
        h.number(holm, h.p_value(holm)),
        h.number(floor, None if floor is None else f"{fmt_number(floor)}%"),
        Cell(escape(j.status), j.status, css="status unavailable" if j.unavailable else "status"),
    ]  # fmt: skip


def _judged_columns(control: str, treatment: str, unit: str) -> list[Column]:
    """The columns of _judged_cells."""
    return [
        Column(f"Δ{unit}", True, f"{treatment} − {control}, mean of the paired differences"),
        Column("Effect %", True, "geometric mean of the per-pair ratios, as a change"),
        Column("95% CI %", True, "paired-t interval of the log-ratios, as a change"),
        Column("p", True, "exact two-sided sign-flip"),
        Column("Holm p", True, "paired-t p on the log-ratios, Holm-adjusted over the table"),
        Column("Noise floor %", True, "a change no larger than this is never flagged"),
        Column("Verdict"),
    ]


def _mde(s: PairedSummary | None) -> Cell:
    if s is None or s.mde_pct is None:
        return Cell(h.DASH, None, True, "n")
    text = escape(f"\u00b1{fmt_number(s.mde_pct)}%")
    return Cell(f'<span title="{escape(s.mde_text())}">{text}</span>', s.mde_pct, True, "n")


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
            _mde(e.judged.summary),
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
        *_judged_columns(control, c.treatment, ""),
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


def calibration(cal: m.CalibrationView, anchor: str) -> str:
    """`ab calibrate`: per endpoint, the noise, the A/A outcome, and the spin's effect against
    the expected one (calibration.summary's rows)."""
    rows = [_calibration_row(r) for r in cal.rows]
    delta = f"+{cal.delta_pct:g}%"
    cols = [Column("Endpoint"), Column("Pairs", True), Column("Noise (SD log-ratio)", True),
            Column("MDE", True), Column("A/A effect"), Column(f"{delta}: expected", True),
            Column(f"{delta}: effect", True), Column("95% CI"), Column("Detected")]  # fmt: skip
    return (
        f'<h2 id="{anchor}calibration">CALIBRATION: A/A and A/A{escape(delta)} (arm '
        f"{escape(cal.arm)})</h2>"
        "<p class=\"note\">Expected: the spin's seconds over the control's value (CPU time: "
        "the effect the spin makes; wall: at least this much). Detected: the 95% interval of "
        "the log-ratio excludes 0.</p>" + h.table(cols, rows, f"{anchor}calibration-table")
    )


def _calibration_row(r: dict) -> Row:
    d = r["delta"]
    low, high = d["ratio_ci"]
    aa = "; ".join(
        h.percent(a["effect_pct"]) + (" FLAGGED" if a["flagged"] else "") for a in r["aa"]
    )
    noise, mde = r["noise_log_sd"], r["mde_pct"]
    ci = h.DASH if low is None else f"{h.percent((low - 1) * 100)} to {h.percent((high - 1) * 100)}"
    cells = [
        h.text(r["label"]),
        h.number(r["n"], str(r["n"])),
        h.number(noise, None if noise is None else f"{noise:.4f}"),
        h.number(mde, None if mde is None else f"\u00b1{fmt_number(mde)}%"),
        h.text(aa or "no A/A arm (--aa)"),
        h.number(d["expected_pct"], h.percent(d["expected_pct"])),
        h.number(d["effect_pct"], h.percent(d["effect_pct"])),
        h.text(ci),
        h.text("yes" if d["detected"] else "no"),
    ]
    return Row(cells, {"data-key": r["key"]})


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
        *_judged_columns(control, t, " ms"),
        Column(f"calls {control}", True),
        Column(f"calls {t}", True),
        Column("Δ calls", True),
        Column("Share", True, f"of {t}'s compile wall"),
        Column("Per pair", False, "self-time change per pair; bar: 95% CI; shaded: noise floor"),
    ]
    ident = f"{anchor}passes-{t}-table"
    flagged = sum(1 for p in c.passes or [] if p.judged.flagged)
    only = _one_arm_only(c, f"{anchor}passes-{t}-only")
    return (
        f'<h2 id="{anchor}passes-{escape(t)}">Passes: {escape(t)} vs {escape(control)}</h2>'
        f'<p class="note">Self time per pass (its duration minus the pass managers it ran, '
        f"summed over its runs and the rungs of a trial), mean per trial; {len(rows)} passes in "
        f"both arms, {flagged} flagged (Holm's correction over these {len(rows)} passes). Ranked "
        "as the markdown report ranks them; click a column to sort.</p>"
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
        "class": p.judged.css,
        "data-name": f"{p.name} {p.manager}".lower(),
        "data-flagged": "1" if p.judged.flagged else "0",
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
