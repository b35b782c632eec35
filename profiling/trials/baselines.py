"""Hook for the upstream baselines beside our schedules (`compile-ahead ab baselines`).

B0 and B1 are OpenVINO's NPU LLM pipeline (NPUW) run on CPU with the generate pyramid off and
on, on the same weights as our static graphs (the stateful model of runtime/stateful.py). They
enter the trial engine as two more schedules: a trial is `compile-ahead run --schedule b0|b1`,
which the runtime serves through runtime/upstream.py with the same report keys as i1/i2/i3
(foreground compile wall = compile_model with all variants, decode tok/s per rung range,
KV and RSS). Everything else (design, statistics, table, plot) is the schedule A/B's.
"""

from __future__ import annotations

import importlib

from compile_ahead.errors import CompileAheadError

BASELINES = {
    "b0": "OpenVINO NPUW LLM pipeline on CPU, pyramid off (one max-size generate graph)",
    "b1": "OpenVINO NPUW LLM pipeline on CPU, pyramid on (all variants compiled up front)",
}
UPSTREAM_MODULE = "compile_ahead.runtime.upstream"


def require_upstream() -> None:
    """Fail in one line until the runtime can run the upstream pipeline as a schedule."""
    try:
        importlib.import_module(UPSTREAM_MODULE)
    except ImportError as err:
        raise CompileAheadError(
            f"upstream baselines need {UPSTREAM_MODULE} (NPUW pyramid off/on as schedules "
            f"b0/b1), which this build lacks: {err}"
        ) from err


def describe(arms: tuple[str, ...]) -> dict[str, str]:
    return {a: BASELINES[a] for a in arms if a in BASELINES}
