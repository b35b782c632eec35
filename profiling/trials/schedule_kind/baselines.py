"""Upstream baselines beside our schedules (`compile-ahead ab baselines`).

The seed's B0 and B1 as OpenVINO ships them: its NPU LLM pipeline (NPUW) run on CPU with the
generate pyramid off (arm npuw-b0) and on (npuw-b1), on the same weights as our static graphs
(the stateful model of runtime/graphs/stateful.py, configured by runtime/baselines/npuw.py and run
by
runtime/baselines/stateful_runner.py). Each such trial is upstream_trial.py in a fresh process,
writing
the keys of `compile-ahead run --report` (foreground compile = build + compile_model with every
variant, decode tok/s per rung range, reserved KV, peak RSS, top-1 around the boundaries), so
design, statistics, table and plot are the schedule A/B's. (b0/b1 without the prefix are the
ladder runtime's own static-graph versions of the same two designs.) The arm genai is
openvino-genai's LLMPipeline on CPU (genai_trial.py), what a CPU user would run instead.
"""

from __future__ import annotations

import importlib

from compile_ahead.errors import CompileAheadError

BASELINES = {
    "npuw-b0": "OpenVINO NPUW LLM pipeline on CPU, pyramid off (one max-size generate graph)",
    "npuw-b1": "OpenVINO NPUW LLM pipeline on CPU, pyramid on (all variants compiled up front)",
    "genai": "openvino-genai LLMPipeline on CPU (dynamic shapes, one compile; greedy, since it "
    "cannot be teacher-forced)",
}
UPSTREAM_MODULE = "compile_ahead.runtime.baselines.npuw"


def require_upstream() -> None:
    """Fail in one line until the runtime can run the upstream pipeline as a schedule."""
    try:
        importlib.import_module(UPSTREAM_MODULE)
    except ImportError as err:
        raise CompileAheadError(
            f"upstream baselines need {UPSTREAM_MODULE} (NPUW pyramid off/on), which this "
            f"build lacks: {err}"
        ) from err


def describe(arms: tuple[str, ...]) -> dict[str, str]:
    return {a: BASELINES[a] for a in arms if a in BASELINES}
