"""A campaign analysed once for every view of it: `campaign report` writes its files and the
compare page draws its page from these objects (``analyse_runs``), so both say the same.

Each cell that has blocks done is analysed as `ab report` analyses an experiment
(`trials.experiment.analyse_experiment`); its cross-cell rows carry that analysis's paired
summaries and judgements (trials.power: interval, Holm, noise floor), never a rule of their own.
A compile cell also gets its compile wall per arm and, with pass profiles, the passes that
moved between consecutive arms (history.py).

The cells come from a store (``from_store``) or from a `campaign report` directory
(``from_report``: its campaign.json names the design and the cells, whose directories hold
the experiment.json and trials.jsonl the report wrote), so a report copied elsewhere still
has its page.
"""

from __future__ import annotations

import functools
import shlex
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.campaigns.definition.spec import block_flags
from compile_ahead.profiling.campaigns.persistence.cells import CellRun, cell_runs
from compile_ahead.profiling.campaigns.persistence.store import Store
from compile_ahead.profiling.campaigns.results.history import (
    PassMove,
    WallPanel,
    is_compile_wall,
    pass_moves,
    wall_panels,
)
from compile_ahead.profiling.results_format.campaign import SUMMARY_JSON, read_summary
from compile_ahead.profiling.results_format.experiment import load_experiment
from compile_ahead.profiling.results_format.records import load_records
from compile_ahead.profiling.trials.analysis import Endpoint
from compile_ahead.profiling.trials.experiment import ExperimentAnalysis, analyse_experiment
from compile_ahead.profiling.trials.kinds import KINDS
from compile_ahead.profiling.trials.power import NOT_TESTED, Judgement
from compile_ahead.profiling.trials.report import display_unit, fmt_number
from compile_ahead.profiling.trials.stats import PairedSummary

SEED_ENDPOINTS = ("foreground_compile", "critical_path", "decode", "boundary_wait")
# Besides the compile wall per rung and in all: compile CPU time, instructions, pass self time.
COMPILE_ENDPOINTS = ("cpu_total", "instructions_total", "pass_self_total")
TOP1_TALLY = "Boundary top-1 agreement"
REPORT_JSON = SUMMARY_JSON  # `campaign report`'s summary, also what marks its directory
NO_PAIR = "no complete pair"
A_COUNT = "a count, not tested"


@dataclass(frozen=True)
class CrossRow:
    """One row of the cross-cell table: a cell's endpoint, one treatment against the control."""

    cell: str  # the cell's label
    cell_dir: str  # its directory in the report (one per cell, or per cell and machine)
    machine: str | None  # the fingerprint digest its blocks ran on
    endpoint: str  # the endpoint's key ("top1" for the top-1 agreement count)
    label: str
    unit: str
    treatment: str
    control: str
    pairs: int
    summary: PairedSummary | None  # None: no complete pair (or a count)
    judgement: Judgement | None  # the trials' judgement of ``summary``
    count: str | None = None  # a count's text (top-1 agreement): no test

    @property
    def versus(self) -> str:
        return f"{self.treatment} vs {self.control}"

    @property
    def verdict(self) -> str:
        """The judgement's status (flagged direction, or the part of the rule it fails)."""
        if self.count is not None:
            return A_COUNT
        if self.summary is None:
            return NO_PAIR
        return NOT_TESTED if self.judgement is None else self.judgement.status

    @property
    def flagged(self) -> bool:
        return self.judgement is not None and self.judgement.flagged

    def texts(self) -> tuple[str, str]:
        """(effect, CI) as the markdown table shows them."""
        s = self.summary
        if s is None:
            return (self.count or "\u2014", "\u2014")
        shown, div = display_unit(self.unit)
        effect = f"{'+' if s.mean_diff > 0 else ''}{fmt_number(s.mean_diff / div)} {shown}"
        if s.percent is not None:
            effect += f" ({'+' if s.percent > 0 else ''}{fmt_number(s.percent)}%)"
        ci = "\u2014"
        if s.ci_low is not None and s.ci_high is not None:
            ci = f"{fmt_number(s.ci_low / div)} to {fmt_number(s.ci_high / div)} {shown}"
        return effect, ci

    def to_dict(self) -> dict:
        effect, ci = self.texts()
        s, j = self.summary, self.judgement
        return {
            "cell": self.cell, "dir": self.cell_dir, "machine": self.machine,
            "endpoint": self.endpoint, "label": self.label, "unit": self.unit,
            "versus": self.versus, "comparison": None if s is None else s.to_dict(),
            "judgement": None if j is None else j.to_dict(), "effect": effect, "ci": ci,
            "pairs": self.pairs, "mde_pct": None if s is None else s.mde_pct,
            "verdict": self.verdict, "flagged": self.flagged,
        }  # fmt: skip


@dataclass(frozen=True)
class FailedBlock:
    cell: int
    label: str
    block: int
    host: str | None
    status: str  # failed or refused
    error: str | None

    def text(self) -> str:
        return (
            f"cell {self.label}: block {self.block} {self.status} on {self.host or '?'}: "
            f"{self.error or 'no reason recorded'} (not done since; `campaign run` tries it again)"
        )


@dataclass(frozen=True)
class CampaignDesign:
    """What the campaign is, from its store: the spec, the machines, the failures."""

    name: str
    kind: str
    source: str  # the store (or report directory) it was read from
    spec_path: str
    spec_digest: str
    spec_text: str
    pairs: int
    warmup: int
    endpoints: list[str] | None  # the spec's [report] endpoints
    fingerprints: dict[str, dict] = field(default_factory=dict)  # digest -> machine data
    failures: tuple[FailedBlock, ...] = ()
    stratify: bool = False

    def spec_table(self, name: str) -> dict:
        """A table of the campaign file (it was checked when the store was made)."""
        try:
            table = tomllib.loads(self.spec_text).get(name, {})
        except tomllib.TOMLDecodeError:
            return {}
        return table if isinstance(table, dict) else {}

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "source"}

    @classmethod
    def from_dict(cls, data: dict, source: str) -> CampaignDesign:
        failures = tuple(FailedBlock(**f) for f in data.get("failures", []))
        return cls(**(data | {"failures": failures, "source": source}))


def design_of(store: Store, stratify: bool) -> CampaignDesign:
    meta = store.campaign
    failed = [
        FailedBlock(r["cell"], r["label"], r["block"], r["host"], r["status"], r["error"])
        for r in store.failed_blocks()
    ]
    return CampaignDesign(
        name=meta.name,
        kind=meta.kind,
        source=str(store.path),
        spec_path=meta.spec_path,
        spec_digest=meta.spec_digest,
        spec_text=meta.spec_text,
        pairs=meta.pairs,
        warmup=meta.warmup,
        endpoints=meta.report_endpoints,
        fingerprints=store.fingerprints(),
        failures=tuple(failed),
        stratify=stratify,
    )


@dataclass
class CellAnalysis:
    run: CellRun
    done: ExperimentAnalysis | None = None  # None: not analysed (``refused`` says why)
    rows: list[CrossRow] = field(default_factory=list)
    walls: list[WallPanel] = field(default_factory=list)  # compile: each arm's compile wall
    moves: list[PassMove] = field(default_factory=list)  # compile, pass profiles: arm to arm
    rerun: str | None = None  # the `ab` command that runs the cell's whole design here
    problem: str | None = None  # why its analysis failed

    @property
    def refused(self) -> str | None:
        return self.run.refused or self.problem


@dataclass
class CampaignAnalysis:
    design: CampaignDesign
    cells: list[CellAnalysis]

    @property
    def rows(self) -> list[CrossRow]:
        return [row for cell in self.cells for row in cell.rows]


def table_endpoints(
    kind: str, done: ExperimentAnalysis, chosen: list[str] | None
) -> list[Endpoint]:
    """The cell's endpoints in the table: the spec's, or the kind's that this cell measured."""
    a = done.analysis
    if chosen is not None:
        return [e for e in a.endpoints if e.key in chosen]
    wanted = is_compile_wall if kind == "compile" else SEED_ENDPOINTS.__contains__
    extra = COMPILE_ENDPOINTS if kind == "compile" else ()
    return [
        e
        for e in a.endpoints
        if (wanted(e.key) or e.key in extra)
        and any(s is not None for s in a.comparisons[e.key].values())
    ]


def cell_rows(
    run: CellRun, done: ExperimentAnalysis, kind: str, chosen: list[str] | None
) -> list[CrossRow]:
    """One row per endpoint and treatment of a cell (and its top-1 count)."""
    a = done.analysis
    row = functools.partial(
        CrossRow, cell=run.label, cell_dir=run.dirname, machine=run.machine, control=a.control
    )
    rows = []
    for ep in table_endpoints(kind, done, chosen):
        for t, s in a.comparisons[ep.key].items():
            j = a.judgements.get(ep.key, {}).get(t)
            pairs = 0 if s is None else s.n
            rows.append(row(endpoint=ep.key, label=ep.label, unit=ep.unit,
                            treatment=t, pairs=pairs, summary=s, judgement=j))  # fmt: skip
    for tally in a.tallies:
        if kind != "compile" and tally.label.startswith(TOP1_TALLY):
            rows += [
                row(endpoint="top1", label=tally.label, unit="", treatment=arm,
                    pairs=run.blocks, summary=None, judgement=None, count=text)
                for arm, text in tally.per_arm.items()
                if arm != a.control
            ]  # fmt: skip
    return rows


def _block_flag_values() -> dict[str, bool]:
    """The flags a campaign adds to a cell's `ab` command to run one block (and its --out),
    each with whether it takes a value."""
    flags = [*block_flags(1, 0, 0, None), "--out", "OUT"]
    return {
        f: i + 1 < len(flags) and not flags[i + 1].startswith("--")
        for i, f in enumerate(flags)
        if f.startswith("--")
    }


def cell_rerun(experiment: dict, pairs: int, warmup: int) -> str | None:
    """The command that runs the cell's whole design here: its first block's recorded `ab`
    command (arms as that block's machine resolved them) with the campaign's per-block flags
    replaced by the cell's pairs and warm-ups; None when the block recorded none."""
    invocation = experiment.get("invocation")
    if not isinstance(invocation, dict) or not isinstance(invocation.get("argv"), list):
        return None
    per_block = _block_flag_values()
    kept: list[str] = []
    skip = False
    for arg in map(str, invocation["argv"]):
        name = arg.split("=", 1)[0]
        if skip:
            skip = False
        elif name in per_block:
            skip = per_block[name] and "=" not in arg
        else:
            kept.append(arg)
    return shlex.join([*kept, "--pairs", str(pairs), "--warmup", str(warmup)])


def analyse_cell(design: CampaignDesign, run: CellRun) -> CellAnalysis:
    """The cell's analysis, rows, compile walls and pass moves (a cell not analysed keeps
    the reason)."""
    if run.refused is not None or run.experiment is None:
        return CellAnalysis(run)
    try:
        done = analyse_experiment(run.experiment, run.records, KINDS, run.status)
    except CompileAheadError as err:
        return CellAnalysis(run, problem=f"cannot be analysed: {err}")
    compiled = design.kind == "compile"
    return CellAnalysis(
        run,
        done,
        cell_rows(run, done, design.kind, design.endpoints),
        wall_panels(done) if compiled else [],
        pass_moves(run) if compiled and run.experiment.get("pass_profile") else [],
        cell_rerun(run.experiment, design.pairs, design.warmup),
    )


def analyse_runs(design: CampaignDesign, runs: list[CellRun]) -> CampaignAnalysis:
    """Every cell analysed: what `campaign report` writes and the compare page shows."""
    return CampaignAnalysis(design, [analyse_cell(design, run) for run in runs])


def from_store(store: Store, stratify: bool = False) -> CampaignAnalysis:
    return analyse_runs(design_of(store, stratify), cell_runs(store, stratify))


def cells_json(campaign: CampaignAnalysis) -> list[dict]:
    """The cells as campaign.json lists them (``from_report`` reads them back)."""
    return [
        {"index": c.run.index, "cell": c.run.label, "dir": c.run.dirname,
         "machine": c.run.machine, "blocks": c.run.blocks, "status": c.run.status,
         "refused": c.refused, "workdirs": c.run.workdirs}
        for c in campaign.cells
    ]  # fmt: skip


def _run_from_report(directory: Path, cell: dict) -> CellRun:
    run = CellRun(
        int(cell["index"]), str(cell["cell"]), str(cell["dir"]), cell["machine"],
        blocks=int(cell["blocks"]), status=cell["status"], refused=cell["refused"],
        workdirs=[str(w) for w in cell.get("workdirs", [])],
    )  # fmt: skip
    relative = PurePosixPath(run.dirname)
    if relative.is_absolute() or ".." in relative.parts:
        raise ValueError(f"cell directory {run.dirname!r} is not inside the report")
    if run.refused is None:
        try:
            run.experiment = load_experiment(directory / run.dirname, KINDS)
            run.records = load_records(directory / run.dirname, warn=lambda _line: None)
        except CompileAheadError as err:
            run.refused = f"its report directory cannot be read: {err}"
    return run


def from_report(directory: Path) -> CampaignAnalysis:
    """The campaign of a `campaign report` directory, analysed again from its cells' files."""
    path = directory / REPORT_JSON
    data = read_summary(directory)
    try:
        design = CampaignDesign.from_dict(data["design"], str(directory))
        runs = [_run_from_report(directory, cell) for cell in data["cells"]]
    except (KeyError, TypeError, ValueError) as err:
        raise CompileAheadError(f"{path}: not a campaign report's summary ({err})") from None
    return analyse_runs(design, runs)
