"""The schedules side by side on one model, in one process, run order rotated per repetition.

Prints the seed's tables from the run reports:
  1. copy-and-grow (i1) vs direct (b0): tok/s per context range, migration per boundary and per
     decoded token, average reserved KV (seed: 0.68x of b0, 0.13 ms migration per token);
  2. i1 vs i2: foreground compile, critical path, decode, waits (targets: i2 foreground
     <= 1.1x the first rung's compile and <= 0.35x i1's; zero waits; decode within 10% of i1);
  3. i3 vs i2 and b0: committed KV average vs b0's reserved (target <= 0.55x), bytes copied,
     per-token latency vs i2 (target within 3%).

    python benchmarks/ladder_schedules.py --ladder scaled --prompt-len 32 [--reps 1]
    python benchmarks/ladder_schedules.py --ladder default            # the seed's 1K..8K
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
from pathlib import Path

import numpy as np
from _common import median

from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.ladder.capacities import Ladder
from compile_ahead.runtime.ladder.config import RunConfig
from compile_ahead.runtime.ladder.run_protocol import teacher_forced
from compile_ahead.runtime.ladder.runner import RunResult, run_ladder
from compile_ahead.runtime.ladder.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model

MIB = 2**20


def range_rates(run: RunResult, ladder: Ladder) -> list[float | None]:
    """tok/s over each context range [0, C1), [C1, C2), ... from per-step times."""
    edges = (0, *ladder.rungs)
    rates = []
    for lo, hi in itertools.pairwise(edges):
        ns = [d for d, c in zip(run.step_ns, run.step_context, strict=True) if lo <= c < hi]
        rates.append(len(ns) / (sum(ns) / 1e9) if ns else None)
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--ladder", default="scaled")
    ap.add_argument("--prompt-len", type=int, default=None, help="default: first rung / 8")
    ap.add_argument("--decode-tokens", type=int, default=None, help="default: up to the top")
    ap.add_argument("--schedules", default="b0,b1,i1,i2,i3")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--prefill-chunk", type=int, default=1)
    ap.add_argument("--graph", choices=("whole", "split"), default="whole")
    ap.add_argument("--json", type=Path, default=None, help="also write every report here")
    args = ap.parse_args()

    source = resolve_model(args.model)
    for name in source.weights.names():  # synthetic weights are made lazily: not in a run
        source.weights.get(name)
    ladder = Ladder.parse(args.ladder)
    prompt_len = args.prompt_len or ladder.rungs[0] // 8
    tokens = args.decode_tokens or ladder.top - prompt_len
    proto = teacher_forced(source.config.vocab_size, prompt_len, tokens)
    options = CompileOptions("CPU").resolved()
    names = args.schedules.split(",")
    print(
        f"model: {source.label}\nladder {list(ladder.rungs)}, prompt {prompt_len}, "
        f"{tokens} teacher-forced decode tokens, CPU {options.inference_precision}, "
        f"{args.graph} graphs"
    )

    runs: dict[str, list[RunResult]] = {n: [] for n in names}
    for rep in range(args.reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]  # rotate the order
        for name in order:
            settings = RunConfig(
                SCHEDULES[name],
                ladder,
                proto,
                prefill_chunk=args.prefill_chunk,
                graph=args.graph,
                options=options,
            )
            result = run_ladder(source, settings)
            if result.error is not None:
                raise SystemExit(f"{name} failed: {result.error}")
            runs[name].append(result)
            r = result.report.to_json()
            print(
                f"  rep {rep} {name}: fg compile {r['foreground_compile_s']:.2f} s, critical "
                f"{r['critical_path_s']:.2f} s, decode {r['decode_s']:.2f} s",
                flush=True,
            )
            gc.collect()
    if args.json:
        args.json.write_text(
            json.dumps({n: [x.report.to_json() for x in v] for n, v in runs.items()})
        )

    def rep(name: str, key: str) -> float:
        return median([x.report[key] for x in runs[name]])

    def rates(name: str) -> np.ndarray:
        """Median tok/s per context range over the schedule's repetitions."""
        per_run = np.array([range_rates(x, ladder) for x in runs[name]], dtype=float)
        return np.nanmedian(per_run, axis=0)

    edges = (0, *ladder.rungs)
    ranges = [f"{lo}-{hi}" for lo, hi in itertools.pairwise(edges)]
    if {"b0", "i1"} <= set(runs):
        print("\n1. copy-and-grow (i1) vs direct top-capacity graph (b0)")
        print(f"{'context':>12} {'i1 tok/s':>10} {'b0 tok/s':>10} {'delta':>8}")
        for label, a, b in zip(ranges, rates("i1"), rates("b0"), strict=True):
            print(f"{label:>12} {a:10.2f} {b:10.2f} {100 * (a / b - 1):+7.1f}%")
        bounds = runs["i1"][0].report["boundaries"]
        for k, bd in enumerate(bounds):
            mig = median([x.report["boundaries"][k]["migration_s"] for x in runs["i1"]])
            print(
                f"  boundary {bd['from']}->{bd['to']}: migration {mig * 1e3:.1f} ms, "
                f"{bd['bytes_copied'] / MIB:.1f} MiB copied"
            )
        total_mig = median(
            [sum(b["migration_s"] for b in x.report["boundaries"]) for x in runs["i1"]]
        )
        print(f"  migration per decoded token: {total_mig / tokens * 1e3:.4f} ms (seed 0.1295)")
        ratio = rep("i1", "kv_reserved_avg_bytes") / rep("b0", "kv_reserved_avg_bytes")
        print(
            f"  average reserved KV i1/b0: {ratio:.3f}x "
            f"({rep('i1', 'kv_reserved_avg_bytes') / MIB:.1f} vs "
            f"{rep('b0', 'kv_reserved_avg_bytes') / MIB:.1f} MiB; seed 0.68x)"
        )

    if {"i1", "i2"} <= set(runs):
        print("\n2. eager (i1) vs one-ahead JIT (i2)")
        for key in ("foreground_compile_s", "critical_path_s", "decode_s"):
            a, b = rep("i1", key), rep("i2", key)
            print(f"  {key:<22} i1 {a:8.2f} s  i2 {b:8.2f} s  ratio {b / a:.3f}")
        # What must exist before the first token: the first rung (and split's weight parts).
        first = median(
            [x.report["first_rung_compile_s"] + x.report["weights_compile_s"] for x in runs["i2"]]
        )
        print(
            f"  i2 foreground / first-rung compile: {rep('i2', 'foreground_compile_s') / first:.3f}"
            " (target <= 1.1)"
        )
        waits = [b["wait_s"] for x in runs["i2"] for b in x.report["boundaries"]]
        ready = sum(b["ready"] for x in runs["i2"] for b in x.report["boundaries"])
        print(f"  boundary waits: {ready}/{len(waits)} ready, total wait {sum(waits):.2f} s")

    if {"i3", "i2", "b0"} <= set(runs):
        print("\n3. reserve-and-commit (i3)")
        ratio = rep("i3", "kv_committed_avg_bytes") / rep("b0", "kv_reserved_avg_bytes")
        print(f"  committed KV avg i3 / reserved KV avg b0: {ratio:.3f}x (target <= 0.55)")
        copied = sum(b["bytes_copied"] for x in runs["i3"] for b in x.report["boundaries"])
        print(f"  bytes copied at boundaries: {copied}")
        for label, a, b in zip(ranges, rates("i3"), rates("i2"), strict=True):
            print(f"  {label:>12}: per-token latency i3/i2 {b / a:.3f}x")


if __name__ == "__main__":
    main()
