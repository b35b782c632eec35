"""Measurement power of `ab compile` on qwen2.5-0.5b shapes: what a compile A/B can detect.

    python benchmarks/experiments/measurement_power.py [--work DIR] [--ab-args "--repeat 5 --pin 1"]
    python benchmarks/experiments/measurement_power.py --small  # tiny preset: a smoke run

On a transformers random-init checkpoint of qwen2.5-0.5b's shapes saved in bf16 (written once
into --work), at the C=1024 rung:
  - --runs repeated `ab calibrate --delta 1%` experiments of 10 pairs and `--delta 0.5%` of 20:
    per endpoint, in how many runs the 95% interval of the log-ratio excludes 0 at the last
    pair, and the first pair count at which it did (looking after every pair);
  - --runs `ab compile --aa` experiments of 10 pairs (the control against itself): per endpoint,
    in how many runs it was flagged (the tool's rule) and in how many its interval excluded 0;
  - the minimal detectable effect of each endpoint at 10 pairs (median over the A/A runs).
Every endpoint is in the table, the compile wall among them. --ab-args passes options to every
`ab` command (e.g. --repeat, --statistic, --pin, --prefetch) to compare noise reductions.
Timings on a shared VM are noise: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.models import save_random_checkpoint
from _shared.results import write_result

from compile_ahead.commands.main import main as cli_main
from compile_ahead.profiling.trials.analysis import Analysis, analyse
from compile_ahead.profiling.trials.compile_kind.arms import aa_arms
from compile_ahead.profiling.trials.compile_kind.endpoints import compile_endpoints
from compile_ahead.profiling.trials.compile_kind.exported_rungs import MeasureOptions
from compile_ahead.profiling.trials.design import make_plan
from compile_ahead.profiling.trials.experiment import load_experiment
from compile_ahead.profiling.trials.kinds import KINDS
from compile_ahead.profiling.trials.runner import load_records


@dataclass(frozen=True)
class Setup:
    model: str
    ladder: str
    runs: int
    pairs_1: int  # pairs of the 1% calibrations (and of the A/A runs)
    pairs_05: int
    ab_args: tuple[str, ...]


def analyse_prefix(directory: Path, pairs: int) -> tuple[Analysis, dict]:
    """The experiment in ``directory`` analysed on its first ``pairs`` pairs only."""
    exp = load_experiment(directory, KINDS)
    records = [r for r in load_records(directory) if r.warmup or r.block < pairs]
    plan = make_plan([a["name"] for a in exp["arms"]], pairs, exp["warmup"])
    measure = MeasureOptions.from_experiment(exp)
    endpoints = compile_endpoints(
        tuple(exp["ladder"]), exp["pass_profile"], exp["counters"], measure
    )
    return analyse(records, plan, endpoints, aa_arms(exp["arms"])), exp


def run_ab(argv: list[str]) -> None:
    print("$ compile-ahead " + shlex.join(argv), file=sys.stderr, flush=True)
    if cli_main(argv) != 0:
        raise SystemExit(f"failed: compile-ahead {shlex.join(argv)}")


@dataclass
class Tally:
    label: str
    detected: dict[str, int] = field(default_factory=dict)  # delta -> runs detected at the end
    first: dict[str, list[int | None]] = field(default_factory=dict)  # delta -> first pair count
    aa_flagged: int = 0
    aa_detected: int = 0
    mde_pct: list[float] = field(default_factory=list)
    measured: bool = False  # some run compared it (else: unavailable on this machine)


def calibrations(setup: Setup, work: Path, delta: str, pairs: int, tallies: dict) -> None:
    for run in range(setup.runs):
        out = work / f"calibrate-{delta.rstrip('%')}-{run}"
        run_ab(["ab", "calibrate", "--delta", delta, "--model", setup.model, "--ladder",
                setup.ladder, "--pairs", str(pairs), "--out", str(out), "--quiet", "--no-plot",
                *setup.ab_args])  # fmt: skip
        first: dict[str, int | None] = {}
        for m in range(2, pairs + 1):
            analysis, exp = analyse_prefix(out, m)
            arm = exp["calibration"]["arm"]
            for ep in analysis.endpoints:
                judged = analysis.judgements[ep.key].get(arm)
                tallies.setdefault(ep.key, Tally(ep.label)).measured |= judged is not None
                first.setdefault(ep.key, None)
                if judged is not None and judged.detected and first[ep.key] is None:
                    first[ep.key] = m
                if m == pairs:
                    t = tallies[ep.key]
                    t.detected[delta] = t.detected.get(delta, 0) + bool(judged and judged.detected)
                    t.first.setdefault(delta, []).append(first[ep.key])


def aa_runs(setup: Setup, work: Path, tallies: dict) -> None:
    for run in range(setup.runs):
        out = work / f"aa-{run}"
        run_ab(["ab", "compile", "--arm", "A=current", "--aa", "--model", setup.model,
                "--ladder", setup.ladder, "--pairs", str(setup.pairs_1), "--out", str(out),
                "--quiet", "--no-plot", *setup.ab_args])  # fmt: skip
        analysis, exp = analyse_prefix(out, setup.pairs_1)
        (aa,) = aa_arms(exp["arms"])
        for ep in analysis.endpoints:
            t = tallies.setdefault(ep.key, Tally(ep.label))
            judged = analysis.judgements[ep.key].get(aa)
            summary = analysis.comparisons[ep.key].get(aa)
            t.measured |= judged is not None
            t.aa_flagged += bool(judged and judged.flagged)
            t.aa_detected += bool(judged and judged.detected)
            if summary is not None and summary.mde_pct is not None:
                t.mde_pct.append(summary.mde_pct)


def _firsts(values: list[int | None]) -> str:
    return ",".join("-" if v is None else str(v) for v in values) or "-"


def table(setup: Setup, tallies: dict[str, Tally]) -> str:
    runs, p1, p05 = setup.runs, setup.pairs_1, setup.pairs_05
    header = ["endpoint", f"1%: detected at {p1} pairs", "1%: first pair count per run",
              f"0.5%: detected at {p05}", "0.5%: first pair count", f"A/A flagged ({p1} pairs)",
              "A/A CI excl. 0", f"MDE at {p1} pairs (median)"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for t in tallies.values():
        if not t.measured:
            lines.append("| " + " | ".join([t.label] + ["unavailable"] * (len(header) - 1)) + " |")
            continue
        mde = f"{statistics.median(t.mde_pct):.3g}%" if t.mde_pct else "unavailable"
        cells = [t.label, f"{t.detected.get('1%', 0)}/{runs}", _firsts(t.first.get("1%", [])),
                 f"{t.detected.get('0.5%', 0)}/{runs}", _firsts(t.first.get("0.5%", [])),
                 f"{t.aa_flagged}/{runs}", f"{t.aa_detected}/{runs}", mde]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=Path("ab-results/measurement-power"))
    p.add_argument("--small", action="store_true", help="tiny preset, 2 runs, few pairs")
    p.add_argument("--runs", type=int, default=None)
    p.add_argument("--ab-args", default="", help="options added to every `ab` command")
    p.add_argument("--json", type=Path, default=None, help="also write the tallies here")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    extra = tuple(shlex.split(args.ab_args))
    if args.small:
        setup = Setup("tiny", "16", args.runs or 2, 4, 6, extra)
    else:
        checkpoint = save_random_checkpoint(args.work / "qwen2.5-0.5b-random-hf")
        setup = Setup(str(checkpoint), "1024", args.runs or 5, 10, 20, extra)
    stamp = args.work / f"run-{len(list(args.work.glob('run-*')))}"
    stamp.mkdir()
    tallies: dict[str, Tally] = {}
    calibrations(setup, stamp, "1%", setup.pairs_1, tallies)
    calibrations(setup, stamp, "0.5%", setup.pairs_05, tallies)
    aa_runs(setup, stamp, tallies)
    print(f"\nmodel {setup.model}, C={setup.ladder}, {setup.runs} runs each, ab options: "
          f"{shlex.join(extra) or '(defaults)'}; results in {stamp}\n")  # fmt: skip
    print(table(setup, tallies))
    if args.json:
        write_result(args.json, "measurement_power", {k: vars(t) for k, t in tallies.items()}, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
