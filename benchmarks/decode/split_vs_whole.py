"""Split graphs against whole graphs on one model: compile, memory, decode, and NPUW.

Prints, measured side by side:
  - successor-rung compile, split (attention core) / whole (target <= 0.05), interleaved;
  - decode step at C=1024 and C=8192, split / whole (target <= 1.05), interleaved, with a
    per-call breakdown of where a split step's time goes;
  - RSS with every rung compiled, split / whole (target <= 0.35), each in a fresh process;
  - foreground compile of `i2 --graph split` (weight parts + first core) against OpenVINO's
    NPU LLM pipeline with the pyramid on CPU, same weights (target <= 0.5), fresh processes.

    python benchmarks/decode/split_vs_whole.py [--model qwen2.5-0.5b] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import fresh_json, median, orders

from compile_ahead.runtime.base.measure import rss_bytes
from compile_ahead.runtime.compile.graph.split_step import WeightParts, compile_attention_core
from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.ladder.settings.capacities import DEFAULT_LADDER
from compile_ahead.runtime.model.kv_arena import KVArena
from compile_ahead.runtime.sources.base import ModelSource
from compile_ahead.runtime.sources.resolve import resolve_model


def materialize(source) -> None:
    for name in source.weights.names():  # synthetic weights are made lazily: not per graph
        source.weights.get(name)


def child_rss(model: str, mode: str, ladder: list[int]) -> dict:
    """In a fresh process: compile every rung in `mode` and report RSS and compile times."""
    source = resolve_model(model)
    materialize(source)
    options = CompileOptions("CPU").resolved()
    base = rss_bytes()
    t0 = time.perf_counter()
    keep: list[object] = []
    if mode == "npuw":
        from compile_ahead.runtime.baselines.npuw import compile_npuw

        runner = compile_npuw(source, ladder[-1] - 64, 64, pyramid=True)
        keep.append(runner)
        return {"compile_s": runner.compile_s, "rss_added": rss_bytes() - base}
    if mode == "split":
        parts = WeightParts(source, options)
        first = time.perf_counter() - t0
        for c in ladder:
            keep.append(
                compile_attention_core(parts, GraphSpec(c, 1, options.kv_precision), options)
            )
            if c == ladder[0]:
                first = time.perf_counter() - t0
        keep.append(parts)
    else:
        first = 0.0
        for c in ladder:
            keep.append(compile_step(source, GraphSpec(c, 1, options.kv_precision), options))
            if c == ladder[0]:
                first = time.perf_counter() - t0
    return {
        "first_rung_s": first,
        "all_s": time.perf_counter() - t0,
        "rss_added": rss_bytes() - base,
    }


def run_child(model: str, mode: str, ladder: list[int]) -> dict:
    ladder_text = ",".join(map(str, ladder))
    return fresh_json(
        [sys.executable, __file__, "--child", mode, "--model", model, "--ladder", ladder_text]
    )


def time_steps(step, context: int, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        step.run(np.asarray([11], np.int64), context)
        out.append(time.perf_counter() - t0)
    return out[1:]


def split_breakdown(step, context: int, n: int) -> dict[str, float]:
    """Where a split decode step's time goes: weight parts, attention cores, host glue."""
    parts = step.parts
    totals = {"weight parts": 0.0, "attention cores": 0.0, "head": 0.0, "whole step": 0.0}
    for _ in range(n):
        s0 = time.perf_counter()
        parts.embed(np.asarray([11], np.int64))
        parts.past_length[...] = context
        for w, a in zip(parts.requests, step.requests, strict=False):
            t0 = time.perf_counter()
            w.infer()
            t1 = time.perf_counter()
            a.infer()
            totals["weight parts"] += t1 - t0
            totals["attention cores"] += time.perf_counter() - t1
        t0 = time.perf_counter()
        parts.requests[-1].infer()
        totals["head"] += time.perf_counter() - t0
        totals["whole step"] += time.perf_counter() - s0
    return {k: 1e3 * v / n for k, v in totals.items()}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--ladder", default=",".join(map(str, DEFAULT_LADDER)))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return ap.parse_args()


def successor_compile(
    source: ModelSource, parts: WeightParts, options: CompileOptions, ladder: list[int], rounds: int
) -> None:
    """Successor rungs compiled interleaved whole and split (the weight parts already are)."""
    kv = options.kv_precision
    whole_s, split_s = [], []
    for r in range(rounds):
        c = ladder[1 + r % (len(ladder) - 1)]
        t0 = time.perf_counter()
        compile_step(source, GraphSpec(c, 1, kv), options)
        whole_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        compile_attention_core(parts, GraphSpec(c, 1, kv), options)
        split_s.append(time.perf_counter() - t0)
    ratios = [s / w for s, w in zip(split_s, whole_s, strict=True)]
    print(
        f"successor compile: whole {statistics.median(whole_s):.2f} s, split "
        f"{statistics.median(split_s) * 1e3:.0f} ms, split/whole {statistics.median(ratios):.4f}"
        " (target <= 0.05)"
    )


def decode(
    source: ModelSource,
    parts: WeightParts,
    options: CompileOptions,
    ladder: list[int],
    rounds: int,
    steps: int,
) -> None:
    """Decode on the first and top rungs, whole and split interleaved per round."""
    kv = options.kv_precision
    graphs = {}
    for c in (ladder[0], ladder[-1]):
        arena = KVArena(source.config, c, kv)
        whole = compile_step(source, GraphSpec(c, 1, kv), options).step
        split = compile_attention_core(parts, GraphSpec(c, 1, kv), options).step
        whole.bind(arena)
        split.bind(arena)
        graphs[c] = (arena, whole, split)
    for c, (_, whole, split) in graphs.items():
        pairs, w_ms, s_ms = [], [], []
        for _, order in orders((whole, split), rounds):
            res = {id(v): median(time_steps(v, c - 24, steps + 1)) for v in order}
            w_ms.append(res[id(whole)])
            s_ms.append(res[id(split)])
            pairs.append(res[id(split)] / res[id(whole)])
        print(
            f"decode C={c}: whole {1e3 * statistics.median(w_ms):.1f} ms, split "
            f"{1e3 * statistics.median(s_ms):.1f} ms, split/whole {statistics.median(pairs):.3f}"
            " (target <= 1.05)"
        )
        b = split_breakdown(split, c - 24, steps)
        print("  split step breakdown (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in b.items()))


def fresh_processes(model: str, ladder: list[int]) -> None:
    """RSS with every rung compiled and the foreground compile, each arm in its own process."""
    print("fresh processes (RSS and foreground compile) ...", flush=True)
    w = run_child(model, "whole", ladder)
    s = run_child(model, "split", ladder)
    print(
        f"RSS with all {len(ladder)} rungs compiled: whole {w['rss_added'] / 2**30:.2f} GiB, "
        f"split {s['rss_added'] / 2**30:.2f} GiB, split/whole "
        f"{s['rss_added'] / w['rss_added']:.3f} (target <= 0.35)"
    )
    n = run_child(model, "npuw", ladder)
    ratio = s["first_rung_s"] / n["compile_s"]
    print(
        f"foreground compile: i2 --graph split (weights + first core) {s['first_rung_s']:.2f} s, "
        f"NPUW pyramid on CPU {n['compile_s']:.2f} s, ratio {ratio:.3f} (target <= 0.5)"
    )


def main() -> None:
    args = parse_args()
    ladder = [int(c) for c in args.ladder.split(",")]
    if args.child:
        print(json.dumps(child_rss(args.model, args.child, ladder)))
        return
    source = resolve_model(args.model)
    materialize(source)
    options = CompileOptions("CPU").resolved()
    print(f"model: {source.label}; CPU {options.inference_precision}, ladder {ladder}")
    t0 = time.perf_counter()
    parts = WeightParts(source, options)
    print(f"weight parts compiled once: {time.perf_counter() - t0:.2f} s")
    successor_compile(source, parts, options, ladder, args.rounds)
    decode(source, parts, options, ladder, args.rounds, args.steps)
    fresh_processes(args.model, ladder)


if __name__ == "__main__":
    main()
