"""The results page's figures (docs/figures/*.svg), from real runs: `measure` makes the runs,
`draw` writes the SVGs from what they wrote.

    python benchmarks/docs_figures/figures.py measure RUNS     # ~15 min on 2 busy vCPUs
    python benchmarks/docs_figures/figures.py draw RUNS --out docs/figures

`measure` runs every schedule (b0, b1, i1, i2, i3) once, each `compile-ahead run` in a fresh
process with a report and a trace, on qwen2.5-0.5b's shapes (synthetic bf16 weights, written
once to the user cache on first use), ladder 128,256,512, a 64-token prompt and 400 decode
steps, so every run crosses 128 and 256, with no compile cache (as `ab schedule`'s trials);
then benchmarks/batching/batch_decode_step.py at each rung's capacity (B = 1, 2, 4, 8
interleaved in one process, 5 rounds of 8 steps). RUNS/host.json keeps the date, the CPU
(`lscpu`), each command line and the load average before and after it. A run whose result is
there is kept (`--again` reruns it); a failed one is tried once more.

`draw` writes three figures, every number read from those files:

- timelines.svg: i1 and i2 on one time axis, each a device track (prefill, decode per rung,
  boundaries, the report's waits for a graph) and a host track (each compile job as a bar,
  foreground or background), from the traces (RUNS/i1.pftrace, RUNS/i2.pftrace) and reports;
- schedules.svg: per schedule, the foreground compile against the protocol critical path
  (the reports' foreground_compile_s, prefill_s, decode_s, critical_path_s and
  background_compile_s);
- batch_steps.svg: the median [B, C] decode step against B per capacity (the step runs' logs).

Plain SVG written by hand: no plotting library.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

SCHEDULES = ("b0", "b1", "i1", "i2", "i3")
BATCHES = (1, 2, 4, 8)
LADDER = (128, 256, 512)

# Colours: the seed's Sketch 2 draws useful inference red and the next compiled shape blue.
DECODE = ("#f4a6a0", "#e4675e", "#b8322b")  # one shade per rung, darker as C grows
PREFILL = "#8e6bb8"
FOREGROUND = "#e08a1e"  # a compile the first token or the next step waits for
BACKGROUND = "#3a78c2"  # a compile while the device decodes
STARTUP = "#c9c9c9"
INK = "#222"
GRID = "#ddd"
WIDTH = 720  # the docs column shows an image this wide at its own size
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"


# --- measure -------------------------------------------------------------------------------


def run_flags(args: argparse.Namespace) -> list[str]:
    """The flags every run shares."""
    return [
        "--model", args.model, "--synthetic-dtype", args.synthetic_dtype,
        "--ladder", ",".join(map(str, LADDER)), "--prompt-len", str(args.prompt_len),
        "--decode-tokens", str(args.decode_tokens), "--no-cache", "--no-progress",
    ]  # fmt: skip


def planned_runs(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """(name, command) of every run `measure` makes: each schedule once at B=1 (a report and
    a trace each), then the decode step per B at each rung's capacity."""
    base = ["compile-ahead", "run", *run_flags(args)]
    runs = [
        (s, [*base, "--schedule", s, "--report", f"{s}.json", "--trace", f"{s}.pftrace"])
        for s in SCHEDULES
    ]
    script = Path(__file__).resolve().parents[1] / "batching" / "batch_decode_step.py"
    batches = ",".join(map(str, BATCHES))
    return runs + [
        (f"steps-c{c}", [sys.executable, str(script), "--model", args.model, "--capacity",
                         str(c), "--batches", batches, "--rounds", "5", "--steps", "8"])
        for c in LADDER
    ]  # fmt: skip


def host_facts() -> dict[str, object]:
    """The CPU model, its count and the date, as the results page records a host."""
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next(
        (ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")),
        "unknown",
    )
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": model,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "compile-ahead": shutil.which("compile-ahead"),
    }


def clock() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S UTC")


def measure_one(out: Path, name: str, cmd: list[str], attempt: int) -> dict[str, object]:
    """Run one command in ``out``, its output in NAME.log (NAME.N.log for a later attempt);
    what ran, how it ended, the load average before and after."""
    before, started = os.getloadavg()[0], clock()
    print(f"{name}: {shlex.join(cmd)}", flush=True)
    with open(out / (f"{name}.log" if attempt == 1 else f"{name}.{attempt}.log"), "w") as log:
        done = subprocess.run(cmd, cwd=out, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        print(f"{name}: exit {done.returncode}, see {out / (name + '.log')}", flush=True)
    return {
        "name": name, "command": shlex.join(cmd), "exit": done.returncode,
        "started": started, "ended": clock(),
        "load_before": round(before, 2), "load_after": round(os.getloadavg()[0], 2),
    }  # fmt: skip


def done(out: Path, name: str) -> bool:
    """Whether a run's result is there: a schedule's report, or a step run's finished log."""
    if name.startswith("steps-"):
        log = out / f"{name}.log"
        return log.exists() and bool(parse_steps(log.read_text()))
    return (out / f"{name}.json").exists()


def measure(args: argparse.Namespace) -> int:
    """Every planned run whose report is not there yet; a failed run is tried once more."""
    out: Path = args.runs
    out.mkdir(parents=True, exist_ok=True)
    facts = out / "host.json"
    host = json.loads(facts.read_text()) if facts.exists() else host_facts() | {"runs": []}
    failed = 0
    for name, cmd in planned_runs(args):
        if done(out, name) and not args.again:
            print(f"{name}: kept (its result is there)", flush=True)
            continue
        for attempt in (1, 2):
            host["runs"].append(measure_one(out, name, cmd, attempt))
            facts.write_text(json.dumps(host, indent=1) + "\n")
            if host["runs"][-1]["exit"] == 0:
                break
        failed += host["runs"][-1]["exit"] != 0
    return 1 if failed else 0


# --- reading a run --------------------------------------------------------------------------


@dataclass
class Slice:
    track: str
    name: str
    start: float  # seconds from the trace's first event (the protocol's start)
    end: float


@dataclass
class Run:
    name: str
    report: dict
    slices: list[Slice] = field(default_factory=list)

    def on(self, track_prefix: str) -> list[Slice]:
        return [s for s in self.slices if s.track.startswith(track_prefix)]


def read_trace(path: Path) -> list[Slice]:
    """Every slice of a Perfetto trace the toolkit wrote, with its track's name."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    from compile_ahead.profiling.perfetto.validate import TraceReport, iter_packets

    tracks: dict[int, str] = {}
    names: dict[int, str] = {}
    open_: dict[int, list[tuple[str, int]]] = {}
    found: list[tuple[str, str, int, int]] = []
    for packet in iter_packets(path.read_bytes(), TraceReport(str(path))):
        if packet.HasField("track_descriptor"):
            tracks[packet.track_descriptor.uuid] = packet.track_descriptor.name
        for entry in packet.interned_data.event_names:
            names[entry.iid] = entry.name
        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        if event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            name = event.name or names.get(event.name_iid, "")
            open_.setdefault(event.track_uuid, []).append((name, packet.timestamp))
        elif event.type == pb.TrackEvent.TYPE_SLICE_END and open_.get(event.track_uuid):
            name, begin = open_[event.track_uuid].pop()
            found.append((tracks.get(event.track_uuid, ""), name, begin, packet.timestamp))
    t0 = min((f[2] for f in found), default=0)
    return [Slice(t, n, (b - t0) / 1e9, (e - t0) / 1e9) for t, n, b, e in found]


def read_run(runs: Path, name: str) -> Run:
    report = json.loads((runs / f"{name}.json").read_text())
    return Run(name, report, read_trace(runs / f"{name}.pftrace"))


# --- SVG helpers ----------------------------------------------------------------------------


class Svg:
    def __init__(self, width: int, height: int, title: str) -> None:
        self.width, self.height = width, height
        self.parts = [f"<title>{escape(title)}</title>"]

    def rect(
        self, x: float, y: float, w: float, h: float, fill: str, tip: str = "", edge: str = ""
    ) -> None:
        title = f"<title>{escape(tip)}</title>" if tip else ""
        stroke = f" stroke='{edge}' stroke-width='1'" if edge else ""
        self.parts.append(
            f"<rect x='{x:.1f}' y='{y:.1f}' width='{max(w, 0.8):.1f}' height='{h:.1f}' "
            f"fill='{fill}'{stroke}>{title}</rect>"
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str = INK, **kw) -> None:
        extra = "".join(f" {k.replace('_', '-')}='{v}'" for k, v in kw.items())
        self.parts.append(
            f"<line x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}' "
            f"stroke='{stroke}'{extra}/>"
        )

    def text(self, x: float, y: float, s: str, size: int = 12, anchor: str = "start", **kw) -> None:
        fill = kw.pop("fill", INK)
        extra = "".join(f" {k.replace('_', '-')}='{v}'" for k, v in kw.items())
        self.parts.append(
            f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}' "
            f"fill='{fill}'{extra}>{escape(s)}</text>"
        )

    def write(self, path: Path) -> None:
        head = (
            f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {self.width} {self.height}' "
            f"width='{self.width}' height='{self.height}' {FONT}>\n"
            f"<rect width='100%' height='100%' fill='white'/>\n"
        )
        path.write_text(head + "\n".join(self.parts) + "\n</svg>\n")
        print(f"wrote {path}")


def legend(svg: Svg, x: float, y: float, items: list[tuple[str, str]]) -> float:
    """Colour swatches with their labels from (x, y), in rows that fit the width; returns the
    last row's y."""
    left = x
    for colour, label in items:
        width = 16 + 6.4 * len(label) + 14
        if x + width > svg.width - 8 and x > left:
            x, y = left, y + 18
        svg.rect(x, y - 9, 12, 10, colour)
        svg.text(x + 16, y, label, 11)
        x += width
    return y


def footnote(svg: Svg, x: float, y: float, text: str) -> float:
    """``text`` in small grey lines that fit the width; returns the last line's y."""
    per_line = int((svg.width - x - 8) / 5.6)
    line = ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > per_line:
            svg.text(x, y, line, 10, fill="#555")
            line, y = word, y + 14
        else:
            line = f"{line} {word}".strip()
    svg.text(x, y, line, 10, fill="#555")
    return y


def axis(svg: Svg, x0: float, x1: float, y: float, top: float, seconds: float, step: float) -> None:
    """A seconds axis along y from x0 (0 s) to x1 (``seconds``), its grid up to ``top``."""
    t = 0.0
    while t <= seconds + 1e-9:
        x = x0 + (x1 - x0) * t / seconds
        svg.line(x, top, x, y, GRID)
        svg.text(x, y + 14, f"{t:g}", 11, "middle")
        t += step
    svg.text(x1, y + 30, "seconds from the command's start", 11, "end")


def nice_step(span: float, ticks: int = 8) -> float:
    """A round tick step giving about ``ticks`` ticks over ``span``."""
    raw = span / ticks
    for m in (1, 2, 5, 10, 20, 50, 100):
        if m >= raw:
            return float(m)
    return float(round(raw, -2))


# --- timelines.svg ------------------------------------------------------------------------


@dataclass
class Track:
    """One schedule's two tracks, in seconds from the command's start."""

    startup: float
    prefill: tuple[float, float] | None
    waits: list[tuple[float, float, str]]  # the device idle, waiting for a graph
    rungs: list[tuple[float, float, int, int]]  # decode span, capacity, steps
    switches: list[tuple[float, str]]
    jobs: list[tuple[float, float, str, bool]]  # compile span, what, background
    first_token: float | None
    end: float


def job_label(track: str) -> str:
    """'compile job 3: decode C=256 (background)' -> 'C=256'; the prefill graph's 'prefill'."""
    what = track.split(":", 1)[1].replace("(background)", "").strip()
    return "prefill" if what.startswith("prefill") else what.replace("decode ", "")


def compile_jobs(run: Run, t0: float) -> list[tuple[float, float, str, bool]]:
    background = {j["job"]: bool(j["background"]) for j in run.report["compile_jobs"]}
    jobs = []
    for s in run.on("compile job "):
        if s.name.startswith("compile "):
            number = int(s.track.split(":")[0].split()[-1])
            jobs.append((t0 + s.start, t0 + s.end, job_label(s.track), background[number]))
    return sorted(jobs)


def decode_spans(steps: list[Slice], switches: list[Slice], ladder: list[int], t0: float):
    """Each rung's decode span (first step's start to last step's end) and its steps."""
    cut = sorted(s.start for s in switches)
    by_rung: dict[int, list[Slice]] = {}
    for step in steps:
        by_rung.setdefault(sum(1 for c in cut if c <= step.start), []).append(step)
    return [
        (t0 + min(s.start for s in ss), t0 + max(s.end for s in ss), ladder[i], len(ss))
        for i, ss in sorted(by_rung.items())
    ]


def track_of(run: Run) -> Track:
    r = run.report
    t0 = r["startup_s"]
    device = run.on(f"{r['device']} decode")
    prefill = next((s for s in device if s.name.startswith("prefill")), None)
    steps = [s for s in device if s.name.startswith("decode")]
    switches = [s for s in device if s.name.startswith("switch ")]
    rungs = decode_spans(steps, switches, r["rungs_used"], t0)
    # The report's waits: decode waiting after prefill for the first decode graph, and at a
    # boundary for a successor that was not ready (the trace's "wait for C=..." slices).
    ready = t0 + prefill.end if prefill else t0
    waits = [(ready, ready + r["decode_graph_wait_s"], "the first decode graph")]
    waits += [(t0 + s.start, t0 + s.end, s.name) for s in device if s.name.startswith("wait ")]
    return Track(
        startup=t0,
        prefill=(t0 + prefill.start, t0 + prefill.end) if prefill else None,
        waits=waits,
        rungs=rungs,
        switches=[(t0 + s.start, s.name.removeprefix("switch ")) for s in switches],
        jobs=compile_jobs(run, t0),
        first_token=r.get("first_token_s"),
        end=t0 + r["critical_path_s"],
    )


class Scale:
    def __init__(self, x0: float, x1: float, seconds: float) -> None:
        self.x0, self.x1, self.seconds = x0, x1, seconds

    def __call__(self, t: float) -> float:
        return self.x0 + (self.x1 - self.x0) * t / self.seconds

    def width(self, a: float, b: float) -> float:
        return self(b) - self(a)


def label_in_or_under(
    svg: Svg,
    x: Scale,
    span: tuple[float, float],
    texts: tuple[str, ...],
    y: float,
    taken: list[tuple[float, float, int]],
    colour: str = "white",
) -> None:
    """The first of ``texts`` (longest first) that fits inside the bar, else the last centred
    under it, one row lower where the row is taken there (rows in ``taken``)."""
    a, b = x(span[0]), x(span[1])
    for text in texts:
        if b - a >= 6.0 * len(text) + 6:
            svg.text((a + b) / 2, y + 15, text, 10, "middle", fill=colour)
            return
    text = texts[-1]
    width = 6.0 * len(text)
    centre = max((a + b) / 2, x.x0 + width / 2)
    row = 0
    while any(
        lo < centre + width / 2 + 3 and centre - width / 2 - 3 < hi and r == row
        for lo, hi, r in taken
    ):
        row += 1
    taken.append((centre - width / 2, centre + width / 2, row))
    svg.text(centre, y + 33 + 12 * row, text, 10, "middle")


def under_rows(taken: list[tuple[float, float, int]]) -> float:
    """The height the labels under a track took."""
    return 12.0 * (max((r for _, _, r in taken), default=-1) + 1)


def draw_device(svg: Svg, x: Scale, tr: Track, y: float) -> float:
    """The device track from ``y``; returns the height used, labels under it included."""
    h = 22
    svg.text(x.x0 - 8, y + 15, "device", 11, "end")
    svg.rect(x(0), y, x.width(0, tr.startup), h, STARTUP, f"startup {tr.startup:.2f} s")
    taken: list[tuple[float, float, int]] = []
    if tr.prefill:
        a, b = tr.prefill
        svg.rect(x(a), y, x.width(a, b), h, PREFILL, f"prefill {b - a:.2f} s")
        label_in_or_under(svg, x, tr.prefill, ("prefill",), y, taken)
    for a, b, what in tr.waits:
        svg.rect(x(a), y, x.width(a, b), h, "url(#wait)", f"{what}: {b - a:.2f} s")
        label_in_or_under(svg, x, (a, b), ("wait",), y, taken, INK)
    for i, (a, b, cap, steps) in enumerate(tr.rungs):
        colour = DECODE[min(i, len(DECODE) - 1)]
        svg.rect(x(a), y, x.width(a, b), h, colour, f"decode C={cap}: {steps} steps, {b - a:.1f} s")
        texts = (f"decode C={cap}", f"C={cap}")
        label_in_or_under(svg, x, (a, b), texts, y, taken, "white" if i else INK)
    for t, what in tr.switches:
        svg.line(x(t), y - 4, x(t), y + h + 4, INK, stroke_width=1.5)
        svg.text(x(t), y - 6, what.replace("->", "→"), 10, "middle")
    return h + 10 + under_rows(taken)


def job_lanes(jobs: list[tuple[float, float, str, bool]]) -> list[int]:
    """A lane per job, so jobs that overlap in time sit on different rows."""
    ends: list[float] = []
    lanes = []
    for a, b, _, _ in jobs:
        lane = next((i for i, e in enumerate(ends) if e <= a + 1e-3), len(ends))
        ends[lane : lane + 1] = [b] if lane < len(ends) else []
        if lane == len(ends):
            ends.append(b)
        lanes.append(lane)
    return lanes


def draw_host(svg: Svg, x: Scale, tr: Track, y: float) -> float:
    """The compile jobs from ``y``; returns the height used."""
    h = 22
    svg.text(x.x0 - 8, y + 15, "host compile", 11, "end")
    lanes = job_lanes(tr.jobs)
    taken: list[tuple[float, float, int]] = []
    for (a, b, what, bg), lane in zip(tr.jobs, lanes, strict=True):
        kind = "background" if bg else "foreground"
        top = y + lane * (h + 4)
        svg.rect(
            x(a),
            top,
            x.width(a, b),
            h,
            BACKGROUND if bg else FOREGROUND,
            f"compile {what} ({kind}): {b - a:.2f} s",
            "white",
        )
        label_in_or_under(svg, x, (a, b), (what,), top, taken)
    return (max(lanes, default=0) + 1) * (h + 4) + 4 + under_rows(taken)


def summary_line(run: Run) -> str:
    r = run.report
    return (
        f"foreground compile {r['foreground_compile_s']:.1f} s, background "
        f"{r['background_compile_s']:.1f} s; first token {r['first_token_s']:.1f} s; "
        f"critical path {r['critical_path_s']:.1f} s; "
        f"peak RSS {r['peak_rss_bytes'] / 2**30:.2f} GiB"
    )


TITLES = {
    "b0": "b0 · direct: the top rung only, compiled up front",
    "b1": "b1 · shared-max pyramid: every rung up front, the top rung's KV",
    "i1": "i1 · eager copy-and-grow: every rung compiled before the first decode step",
    "i2": "i2 · one-ahead JIT: the first rung, then one successor while the device decodes",
    "i3": "i3 · reserve-and-commit: one-ahead, the KV reserved once, nothing copied",
}


def draw_timelines(runs: list[Run], host: dict, path: Path) -> None:
    tracks = [track_of(r) for r in runs]
    seconds = max(t.end for t in tracks) * 1.02
    x = Scale(100, WIDTH - 16, seconds)
    svg = Svg(WIDTH, 60 + 150 * len(runs), "i1 and i2 timelines")
    svg.parts.insert(0, WAIT_PATTERN)
    y = 24.0
    for run, tr in zip(runs, tracks, strict=True):
        svg.text(12, y, TITLES.get(run.name, run.name), 13, font_weight="bold")
        svg.text(12, y + 16, summary_line(run), 11)
        y += 40
        used = draw_device(svg, x, tr, y)
        if tr.first_token:
            ft = x(tr.first_token)
            svg.line(ft, y - 2, ft, y + 24, INK, stroke_dasharray="2,2")
            svg.text(ft, y - 6, "first token", 10, "middle")
        y += used + 8
        y += draw_host(svg, x, tr, y) + 16
    axis(svg, x.x0, x.x1, y, 60, seconds, nice_step(seconds))
    y += 48
    y = legend(
        svg,
        12,
        y,
        [
            (STARTUP, "startup"),
            (PREFILL, "prefill"),
            (DECODE[1], "decode (a shade per rung)"),
            ("url(#wait)", "waiting for a graph"),
            (FOREGROUND, "foreground compile"),
            (BACKGROUND, "background compile"),
        ],
    )
    y = footnote(svg, 12, y + 18, provenance(host, runs))
    svg.height = int(y + 12)
    svg.write(path)


WAIT_PATTERN = (
    "<defs><pattern id='wait' width='6' height='6' patternUnits='userSpaceOnUse' "
    "patternTransform='rotate(45)'><rect width='6' height='6' fill='#f3f3f3'/>"
    "<line x1='0' y1='0' x2='0' y2='6' stroke='#999' stroke-width='2'/></pattern></defs>"
)


def provenance(host: dict, runs: list[Run], what: str = "") -> str:
    """The figure's footnote: when, on what, from which runs."""
    from_ = what or "runs " + ", ".join(r.name for r in runs)
    return (
        f"measured {host['date']} on {host['cpu']}, {host['cpus']} vCPUs (shared, loaded); "
        f"{from_}; drawn by benchmarks/docs_figures/figures.py"
    )


# --- schedules.svg --------------------------------------------------------------------------


def draw_schedules(runs: list[Run], host: dict, path: Path) -> None:
    """Per schedule: the critical path as foreground compile, prefill, decode and the rest,
    and under it the compile that ran in the background."""
    seconds = max(r.report["critical_path_s"] for r in runs) * 1.05
    x = Scale(44, 530, seconds)
    svg = Svg(WIDTH, 90 + 46 * len(runs), "foreground compile against the critical path")
    svg.text(
        12,
        20,
        "Foreground compile against the protocol critical path, per schedule",
        13,
        font_weight="bold",
    )
    y = 44.0
    for run in runs:
        r = run.report
        fg, pf, dec = r["foreground_compile_s"], r["prefill_s"], r["decode_s"]
        rest = max(r["critical_path_s"] - fg - pf - dec, 0.0)
        svg.text(36, y + 14, run.name, 12, "end", font_weight="bold")
        t = 0.0
        for length, colour, what in (
            (fg, FOREGROUND, "foreground compile"),
            (pf, PREFILL, "prefill"),
            (dec, DECODE[1], "decode"),
            (rest, GRID, "the rest: switches, bookkeeping"),
        ):
            svg.rect(x(t), y, x.width(t, t + length), 20, colour, f"{what}: {length:.2f} s")
            t += length
        share = fg / r["critical_path_s"]
        svg.text(x(t) + 6, y + 14, f"{fg:.1f} s of {r['critical_path_s']:.1f} s ({share:.0%})", 11)
        bg = r["background_compile_s"]
        if bg > 0:
            svg.rect(
                x(fg + pf), y + 22, x.width(0, bg), 6, BACKGROUND, f"background compile {bg:.2f} s"
            )
            svg.text(
                x(fg + pf + bg) + 6, y + 29, f"background compile {bg:.1f} s", 10, fill=BACKGROUND
            )
        y += 46
    axis(svg, x.x0, x.x1, y, 40, seconds, nice_step(seconds))
    svg.parts[-1] = svg.parts[-1].replace("from the command's start", "of the critical path")
    last = legend(
        svg,
        12,
        y + 46,
        [
            (FOREGROUND, "foreground compile"),
            (PREFILL, "prefill"),
            (DECODE[1], "decode"),
            (GRID, "the rest"),
            (BACKGROUND, "background compile (beside decode)"),
        ],
    )
    y = footnote(svg, 12, y + 64 + (last - (y + 46)), provenance(host, runs))
    svg.height = int(y + 12)
    svg.write(path)


# --- batch_steps.svg ------------------------------------------------------------------------


STEP_LINE = re.compile(r"^B=(\d+): compile ([\d.]+) s, step ([\d.]+) ms", re.M)


def parse_steps(text: str) -> dict[int, float]:
    """batch_decode_step.py's printed lines, ``B=4: compile 1.2 s, step 91.8 ms (...)``: the
    median step (s) per B."""
    return {int(b): float(ms) / 1e3 for b, _, ms in STEP_LINE.findall(text)}


def read_steps(runs: Path) -> dict[int, dict[int, float]]:
    """Per capacity, the median step per B, from each step run's last finished log."""
    out = {}
    for c in LADDER:
        logs = sorted(runs.glob(f"steps-c{c}*.log"))
        parsed = [p for p in (parse_steps(log.read_text()) for log in logs) if p]
        if parsed:
            out[c] = parsed[-1]
    return out


def step_axes(svg: Svg, box: tuple[float, float, float, float], top: float, batches: list[int]):
    """The plot's grid, its ms ticks and its B labels; returns where each B sits."""
    x0, x1, y0, y1 = box
    v, ystep = 0.0, nice_step(top, 6)
    while v <= top + 1e-9:
        yy = y0 - (y0 - y1) * v / top
        svg.line(x0, yy, x1, yy, GRID)
        svg.text(x0 - 6, yy + 4, f"{v:g}", 11, "end")
        v += ystep
    mid = (y0 + y1) / 2
    svg.text(24, mid, "ms per decode step", 11, "middle", transform=f"rotate(-90 24 {mid})")
    xs = {b: x0 + (x1 - x0) * i / max(len(batches) - 1, 1) for i, b in enumerate(batches)}
    for b in batches:
        svg.text(xs[b], y0 + 18, f"B={b}", 11, "middle")
    return xs


def draw_batch_steps(steps: dict[int, dict[int, float]], host: dict, path: Path) -> None:
    """The median decode step against B, a line per capacity, and the tokens/s it gives."""
    batches = sorted({b for per_b in steps.values() for b in per_b})
    top = max(v for per_b in steps.values() for v in per_b.values()) * 1000 * 1.15
    svg = Svg(WIDTH, 330, "decode step against B")
    svg.text(12, 20, "A [B, C] decode step against the batch B, per capacity C", 13,
             font_weight="bold")  # fmt: skip
    box = (70.0, 390.0, 280.0, 44.0)
    xs = step_axes(svg, box, top, batches)
    label_ys: list[float] = []
    for i, (cap, per_b) in enumerate(sorted(steps.items())):
        colour = DECODE[min(i, len(DECODE) - 1)]
        pts = [(xs[b], box[2] - (box[2] - box[3]) * per_b[b] * 1000 / top) for b in sorted(per_b)]
        d = " ".join(f"{'M' if j == 0 else 'L'}{px:.1f},{py:.1f}" for j, (px, py) in enumerate(pts))
        svg.parts.append(f"<path d='{d}' fill='none' stroke='{colour}' stroke-width='2'/>")
        for px, py in pts:
            svg.parts.append(f"<circle cx='{px:.1f}' cy='{py:.1f}' r='3.5' fill='{colour}'/>")
        ly = pts[-1][1] + 4
        while any(abs(ly - other) < 13 for other in label_ys):
            ly += 13  # keep the line ends' labels apart
        label_ys.append(ly)
        svg.text(box[1] + 10, ly, f"C={cap}", 11, fill=colour)
    tx = 455
    svg.text(tx, 56, "median step, ms (aggregate tokens/s)", 11, font_weight="bold")
    for j, (cap, per_b) in enumerate(sorted(steps.items())):
        svg.text(tx, 80 + 64 * j, f"C={cap}", 11, font_weight="bold")
        for k, b in enumerate(sorted(per_b)):
            cell = f"B={b}: {per_b[b] * 1000:.0f} ms ({b / per_b[b]:.0f} tok/s)"
            svg.text(tx + 12 + 122 * (k % 2), 96 + 64 * j + 16 * (k // 2), cell, 10)
    y = footnote(svg, 12, 318, provenance(host, [], "benchmarks/batching/batch_decode_step.py"))
    svg.height = int(y + 12)
    svg.write(path)


def draw(args: argparse.Namespace) -> int:
    runs: Path = args.runs
    host = json.loads((runs / "host.json").read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    draw_timelines([read_run(runs, "i1"), read_run(runs, "i2")], host, args.out / "timelines.svg")
    there = [s for s in SCHEDULES if (runs / f"{s}.json").exists()]
    draw_schedules([read_run(runs, s) for s in there], host, args.out / "schedules.svg")
    draw_batch_steps(read_steps(runs), host, args.out / "batch_steps.svg")
    return 0


# --- main -----------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    m = sub.add_parser("measure", help="make the runs the figures are drawn from")
    m.add_argument("runs", type=Path, help="directory for the runs' reports, traces and logs")
    m.add_argument("--model", default="qwen2.5-0.5b")
    m.add_argument("--synthetic-dtype", default="bf16")
    m.add_argument("--prompt-len", type=int, default=64)
    m.add_argument("--decode-tokens", type=int, default=400)
    m.add_argument("--again", action="store_true", help="rerun runs whose report is there")
    d = sub.add_parser("draw", help="write the SVGs from the runs")
    d.add_argument("runs", type=Path)
    d.add_argument("--out", type=Path, default=Path("docs/figures"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.what == "measure":
        return measure(args)
    return draw(args)


if __name__ == "__main__":
    sys.exit(main())
