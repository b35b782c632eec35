"""Running a serve experiment (`ab serve`): the trace written once into the results directory,
its arms' trial commands, the design, the trials and the report, from what the command
settled and checked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from compile_ahead.output.atomic import write_bytes_atomic
from compile_ahead.output.checks import mark_output_dir
from compile_ahead.profiling.trials.design import make_plan
from compile_ahead.profiling.trials.experiment import report_experiment, run_experiment
from compile_ahead.profiling.trials.run_options import DesignOptions
from compile_ahead.profiling.trials.serve_kind.experiment import ServeCommand, make_arms
from compile_ahead.profiling.trials.serve_kind.kind import SERVE
from compile_ahead.profiling.trials.serve_kind.workload import digest

_KINDS = {"serve": SERVE}  # what the engine needs to run and report a serve experiment
TRACE_NAME = "trace.jsonl"  # the request file every trial replays, in the results directory


@dataclass(frozen=True)
class ServeTrials:
    """What each trial of a serve experiment runs, checked once by the command."""

    policies: tuple[str, ...]  # the arms; the first is the control
    model: str | None  # None with a cost model
    batch_sizes: tuple[int, ...]
    capacities: tuple[int, ...]
    trace_text: bytes  # the request file's content, already read and checked
    trace_source: str  # where it came from: "--requests PATH", or the generator's description
    trace_requests: int
    generated: dict | None  # the generator's values, when it drew the trace
    serve_flags: tuple[str, ...]  # every trial's other `serve` flags
    cold_s: float | None = None  # the cold-start window of the cold TTFT endpoint
    trace_trials: bool = False  # every trial writes its Perfetto trace


def run_serve_experiment(trials: ServeTrials, design: DesignOptions, out: Path) -> int:
    """Write the trace into ``out``, run every trial and report."""
    plan = make_plan(trials.policies, design.pairs, design.warmup, design.first_block)
    mark_output_dir(out)
    trace = out / TRACE_NAME
    write_bytes_atomic(trace, trials.trace_text)
    command = ServeCommand(
        trace.resolve(), trials.batch_sizes, trials.capacities, trials.model,
        trials.serve_flags, trials.trace_trials,
    )  # fmt: skip
    arms = make_arms(trials.policies, command)
    exp = {
        "kind": "serve", "arms": [a.describe() for a in arms], "pairs": design.pairs,
        "warmup": design.warmup, "ladder": list(trials.capacities),
        "buckets": list(trials.batch_sizes), "model": trials.model,
        "trace": {
            "file": TRACE_NAME, "source": trials.trace_source,
            "requests": trials.trace_requests, "sha256": digest(trials.trace_text),
            "generated": trials.generated,
        },
        "serve_flags": list(trials.serve_flags), "cold_s": trials.cold_s,
        "invocation": design.invocation, "first_block": design.first_block,
    }  # fmt: skip
    records = run_experiment(plan, arms, out, exp, _KINDS, design.timeout_s, design.quiet)
    report_experiment(out, exp, records, _KINDS, no_plot=design.no_plot)
    return 0
