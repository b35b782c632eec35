"""What the benchmark scripts share: arms run in fresh processes, their order from the
project's own trial design, and medians and ratios from the project's statistics.

A script imports it as ``_shared.common`` (see ``_shared/__init__.py``).
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from compile_ahead.profiling.trials.design import make_plan
from compile_ahead.profiling.trials.stats import geometric_mean_ratio

T = TypeVar("T")


def round_order(arms: Sequence[T], r: int) -> list[T]:
    """The order ``arms`` run in at round ``r`` of the project's trial design
    (profiling/trials/design.py): AB/BA for two arms, Williams sequences for more, so no arm
    always goes first or always follows the same other."""
    if len(arms) < 2:
        return list(arms)
    plan = make_plan([str(i) for i in range(len(arms))], r + 1, warmup_per_arm=0)
    return [arms[i] for i in plan.blocks[r]]


def orders(arms: Sequence[T], rounds: int) -> Iterator[tuple[int, list[T]]]:
    """Each round and the order its arms run in (``round_order``)."""
    for r in range(rounds):
        yield r, round_order(arms, r)


def run_checked(
    cmd: Sequence[str], timeout: float | None = None, **kwargs
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in a fresh process, its output captured. A failed child ends the benchmark
    with its exit status and the end of its stderr."""
    done = subprocess.run(
        list(cmd), capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"{cmd[0]} ... exited {done.returncode}")
    return done


def fresh_json(cmd: Sequence[str], timeout: float | None = None, **kwargs) -> Any:
    """Run ``cmd`` in a fresh process (``run_checked``); the JSON object its last line of
    output prints."""
    done = run_checked(cmd, timeout, **kwargs)
    lines = done.stdout.strip().splitlines()
    if not lines:
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"{cmd[0]} ... printed nothing")
    return json.loads(lines[-1])


def median(values: Sequence[float]) -> float:
    """The median, NaN for no values (an arm that never ran)."""
    return statistics.median(values) if values else float("nan")


def ratio(control: Sequence[float], treatment: Sequence[float]) -> float:
    """treatment / control as the trial statistics give it: the geometric mean of the paired
    ratios (NaN without pairs, or with a value that is not positive)."""
    value = geometric_mean_ratio(control, treatment) if control else None
    return math.nan if value is None else value


def ratio_line(what: str, ours: Sequence[float], theirs: Sequence[float], unit: str) -> str:
    """One console line: both arms' medians and ours / theirs (paired, geometric mean)."""
    a, b = median(ours), median(theirs)
    return (
        f"  {what:<34} ours {a:8.2f} {unit:<3} LLMPipeline {b:8.2f} {unit:<3} "
        f"ratio {ratio(theirs, ours):5.2f}x"
    )
