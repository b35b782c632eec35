"""`compile-ahead ab serve`: serving policies side by side over one trace.

Each trial is one fresh `compile-ahead serve --requests TRACE --policy P ... --out RESULT`
process: the same trace, grid, model and flags for every arm, only the policy differs. The
compile cache is off in every trial, so each compiles as a cold server does.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials.runner import Arm


def known_policies() -> tuple[str, ...]:
    """The policies `compile-ahead serve --policy` takes."""
    from compile_ahead.runtime.serving.policies import POLICIES

    return tuple(POLICIES)


def parse_arms(text: str) -> tuple[str, ...]:
    """``--arms``: two or more known policies, each once; the first is the control."""
    arms = tuple(a.strip() for a in text.split(",") if a.strip())
    if len(arms) < 2:
        raise CompileAheadError(f"--arms {text!r}: give at least two policies, e.g. up-front,ahead")
    unknown = [a for a in arms if a not in known_policies()]
    if unknown:
        raise CompileAheadError(
            f"--arms: unknown policy {', '.join(unknown)}; choose from "
            f"{', '.join(known_policies())}"
        )
    if len(set(arms)) != len(arms):
        raise CompileAheadError(f"--arms {text!r}: each policy may appear once")
    return arms


@dataclass(frozen=True)
class ServeCommand:
    """What every trial's `compile-ahead serve` is given besides its policy."""

    trace: Path  # the request file every trial replays (the copy in the results directory)
    batch_sizes: tuple[int, ...]
    capacities: tuple[int, ...]
    model: str | None  # None with a cost model (nothing runs on a device)
    flags: tuple[str, ...] = ()  # device, precisions, KV mode, budget, SLOs, cost model ...
    trace_trials: bool = False  # each trial writes its Perfetto trace beside its result

    def argv(self, policy: str) -> tuple[str, ...]:
        model = () if self.model is None else ("--model", self.model)
        trace = ("--trace", "{out}.pftrace") if self.trace_trials else ()
        return (
            sys.executable, "-m", "compile_ahead.commands", "serve", *model,
            "--requests", str(self.trace), "--policy", policy,
            "--buckets", ",".join(map(str, self.batch_sizes)),
            "--ladder", ",".join(map(str, self.capacities)),
            *self.flags, "--out", "{out}", *trace,
        )  # fmt: skip


def make_arms(policies: Sequence[str], command: ServeCommand) -> list[Arm]:
    return [Arm(p, command.argv(p), info={"policy": p}) for p in policies]


def model_label(results: Sequence[dict | None]) -> str:
    """What the trials served, synthetic or not, from their reports."""
    for res in results:
        if res is None:
            continue
        if res.get("simulated") is True:
            return "none: the simulator's cost model (virtual clock, no tokens computed)"
        if "model" in res:
            synthetic = res.get("synthetic")
            kind = "weights ?"
            if isinstance(synthetic, bool):
                kind = "SYNTHETIC weights" if synthetic else "real weights"
            return f"{res['model']} [{kind}] on {res.get('device', '?')}"
    return "unknown (no trial report)"
