"""One upstream-baseline trial: OpenVINO's NPU LLM pipeline (NPUW) on CPU, pyramid off (seed
B0) or on (seed B1), on the stateful model built from the same weights as our static graphs;
writes a report with the keys of `compile-ahead run --report`, so `ab schedule` puts it in the
same table as i1/i2/i3.

    python -m compile_ahead.profiling.trials.schedule_kind.upstream_trial --model M --pyramid on \
        --ladder 1024,2048,4096,8192 --prompt-len 128 --decode-tokens 8064 --report OUT

NPUW is configured as OpenVINO ships it for this context: MIN_RESPONSE_LEN 64 and
MAX_PROMPT_LEN = top rung - 64 (8128 for an 8K ladder). NPUW aligns the prompt capacity up to its
prefill chunk, so the largest generate graph holds top + 64 slots when the top exceeds 1024 (8256
for 8K; runtime/baselines/npuw.py derives the sizes); with the pyramid it also compiles 1024+64,
2048+64, ... variants, all inside compile_model (up front).
Its KV cache is one allocation of the largest size shared by every variant (f16 by default), so
reserved KV = that size from startup; committed host pages are not observable there (None).
The model reaches compile_model through an IR round trip (as optimum's export would); that time
is reported (ir_round_trip_s) and is inside the critical path, not the foreground compile.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compile_ahead.runtime.ladder.settings.capacities import near_boundary, rung_holding

if TYPE_CHECKING:
    from compile_ahead.runtime.baselines.stateful_runner import BaselineResult, StatefulRunner
    from compile_ahead.runtime.model.architecture import ModelConfig
    from compile_ahead.runtime.sources.base import ModelSource

NPUW_RESPONSE = 64
ARMS = {"npuw-b0": False, "npuw-b1": True}  # arm name -> pyramid


def npuw_kv_bytes(cfg: ModelConfig, total_slots: int, bytes_per_value: int = 2) -> int:
    """K and V of every layer for ``total_slots`` positions (NPUW's default f16 KV)."""
    per_slot = cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * bytes_per_value
    return per_slot * total_slots


def per_rung_rates(contexts: list[int], times: list[float], ladder: list[int]) -> list[dict]:
    """Decode steps grouped like the ladder runtime's rungs: rung C takes contexts below C that
    the previous rung does not."""
    rung_of = [rung_holding(ladder, c + 1) for c in contexts]
    out = []
    for cap in ladder:
        sel = [t for r, t in zip(rung_of, times, strict=True) if r == cap]
        total = sum(sel)
        out.append(
            {
                "capacity": cap,
                "tokens": len(sel),
                "decode_s": total,
                "tok_s": len(sel) / total if total else None,
            }
        )
    return out


def boundary_tokens(
    prompt_len: int, tokens: list[int], ladder: list[int], window: int
) -> list[dict]:
    """Top-1 ids around each boundary, keyed like the runtime's report (step, context)."""
    out = []
    for step in range(len(tokens) - 1):
        context = prompt_len + step
        rung = rung_holding(ladder, context + 1) or ladder[-1]
        if near_boundary(ladder, context, window):
            out.append({"step": step, "context": context, "rung": rung, "top1": tokens[step + 1]})
    return out


@dataclass(frozen=True)
class UpstreamTrial:
    """One trial's settings, as `ab schedule` gives them on its command line."""

    model: str
    pyramid: str  # "on" or "off"
    ladder: str
    prompt_len: int
    decode_tokens: int
    boundary_window: int
    report: Path
    synthetic_dtype: str | None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="upstream_trial", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    p.add_argument("--model", required=True)
    p.add_argument("--pyramid", choices=("on", "off"), required=True)
    p.add_argument("--ladder", required=True)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--decode-tokens", type=int, required=True)
    p.add_argument("--boundary-window", type=int, default=3)
    p.add_argument("--report", type=Path, required=True)
    p.add_argument("--synthetic-dtype", default=None, help="as `compile-ahead run` takes it")
    trial = UpstreamTrial(**vars(p.parse_args(argv)))

    from compile_ahead.profiling.trials.compile_kind.exported_rungs import parse_ladder
    from compile_ahead.runtime.baselines.npuw import compile_npuw
    from compile_ahead.runtime.ladder.settings.run_protocol import teacher_forced
    from compile_ahead.runtime.sources.resolve import resolve_model

    ladder = list(parse_ladder(trial.ladder))
    source = resolve_model(trial.model, synthetic_dtype=trial.synthetic_dtype)
    proto = teacher_forced(source.config.vocab_size, trial.prompt_len, trial.decode_tokens)
    t_start = time.perf_counter()  # critical path: weights, build, IR round trip, compile, run
    runner = compile_npuw(source, ladder[-1] - NPUW_RESPONSE, NPUW_RESPONSE, trial.pyramid == "on")
    result = runner.run(list(proto.prompt), trial.decode_tokens, list(proto.forced), False)
    report = _report(trial, source, ladder, runner, result, time.perf_counter() - t_start)
    trial.report.write_text(json.dumps(report, indent=1))
    return 0


def _report(
    trial: UpstreamTrial,
    source: ModelSource,
    ladder: list[int],
    runner: StatefulRunner,
    result: BaselineResult,
    wall_s: float,
) -> dict[str, Any]:
    """The trial's run report (JSON), in the runtime's shape."""
    from compile_ahead.runtime.baselines.npuw import npuw_generate_sizes
    from compile_ahead.runtime.ladder.reporting.report import RungStats, RunReport

    pyramid = trial.pyramid == "on"
    max_prompt = ladder[-1] - NPUW_RESPONSE
    sizes = npuw_generate_sizes(max_prompt, NPUW_RESPONSE, pyramid)
    kv = npuw_kv_bytes(source.config, sizes[-1])
    return RunReport(
        model=source.describe(),
        device="NPU (NPUW, NPUW_DEVICES=CPU)",
        schedule="npuw-b1" if pyramid else "npuw-b0",
        schedule_title=f"NPUW pyramid {trial.pyramid}: OpenVINO's NPU LLM pipeline on CPU",
        ladder=ladder,
        prompt_len=trial.prompt_len,
        decode_tokens=trial.decode_tokens,
        tokens_decoded=len(result.step_times_s),
        # like the ladder runtime's foreground compile, which materializes the (synthetic)
        # weights while building its first rung: weights + build + compile_model
        foreground_compile_s=runner.weights_s + result.build_s + result.compile_s,
        prefill_s=result.prefill_s,
        decode_s=sum(result.step_times_s),
        critical_path_s=wall_s,
        rungs=[
            RungStats(r["capacity"], r["tokens"], r["decode_s"])
            for r in per_rung_rates(result.step_context, result.step_times_s, ladder)
        ],
        boundary_tokens=boundary_tokens(
            trial.prompt_len, result.tokens, ladder, trial.boundary_window
        ),
        kv_reserved_avg_bytes=kv,
        kv_reserved_peak_bytes=kv,
        kv_bytes_definition="reserved: NPUW's shared largest-size KV (f16), from startup",
        graphs_resident_max=len(sizes) + 1,  # generate variants + the prefill graph
        peak_rss_bytes=result.peak_rss_bytes,
        extra={
            "npuw_generate_sizes": sizes,
            "npuw_max_prompt_len": max_prompt,
            "npuw_min_response_len": NPUW_RESPONSE,
            "weights_s": runner.weights_s,
            "build_s": result.build_s,
            "ir_round_trip_s": runner.ir_round_trip_s,
            "compile_model_s": result.compile_s,
            "config": {k: str(v) for k, v in runner.config.items()},
        },
    ).to_json()


if __name__ == "__main__":
    sys.exit(main())
