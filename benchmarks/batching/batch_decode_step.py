"""Decode-step time of a [B, C] graph against batch 1, same weights, interleaved.

One process compiles a decode graph of capacity C for each B, binds each to a KV arena of B
sequences filled to ``--context`` slots, then times a few steps of every B per round (the order
rotated each round), so machine drift hits every B alike. Prints, per B: the compile time, the
median step, the step against B=1's and the aggregate tokens/s (B tokens per step) against
B=1's.

    python benchmarks/batching/batch_decode_step.py [--model qwen2.5-0.5b] [--capacity 256]
        [--batches 1,2,4,8] [--rounds 5] [--steps 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import median, orders

from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.model.kv_arena import KVArena
from compile_ahead.runtime.sources.resolve import resolve_model


class BatchArm:
    """A compiled [B, C] decode graph bound to B sequences of ``context`` filled slots."""

    def __init__(self, source, batch: int, capacity: int, options: CompileOptions, context: int):
        kv = options.resolved().kv_precision
        assert kv is not None
        result = compile_step(source, GraphSpec(capacity, 1, kv, batch=batch), options)
        self.batch, self.compile_s, self.step = batch, result.compile_s, result.step
        # Attention cost does not depend on the values: the arena's zeros stand in for a history.
        self.arena = KVArena(source.config, capacity, kv, batch)
        self.step.bind(self.arena)
        self.ids = np.full(batch, 11, np.int64)
        self.past = np.full(batch, context, np.int64) if batch > 1 else context

    def time_steps(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            self.step.run(self.ids, self.past)
            out.append(time.perf_counter() - t0)
        return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-0.5b")
    p.add_argument("--capacity", type=int, default=256)
    p.add_argument("--context", type=int, default=None, help="filled slots (default C/2)")
    p.add_argument("--batches", default="1,2,4,8")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--inference-precision", default=None)
    args = p.parse_args()
    source = resolve_model(args.model)
    options = CompileOptions(device="CPU", inference_precision=args.inference_precision)
    context = args.context if args.context is not None else args.capacity // 2
    batches = [int(b) for b in args.batches.split(",")]
    arms = {b: BatchArm(source, b, args.capacity, options, context) for b in batches}
    steps: dict[int, list[float]] = {b: [] for b in batches}
    for _, order in orders(batches, args.rounds):
        for b in order:
            arms[b].time_steps(1)  # one warm step after the other arms ran
            steps[b] += arms[b].time_steps(args.steps)
    base = median(steps[batches[0]])
    print(f"{source.label}; C={args.capacity}, context {context}, {args.rounds} rounds")
    for b in batches:
        step = median(steps[b])
        print(
            f"B={b}: compile {arms[b].compile_s:.2f} s, step {step * 1e3:.1f} ms "
            f"({step / base:.2f}x B={batches[0]}), aggregate {b / step:.1f} tok/s "
            f"({b / step / (batches[0] / base):.2f}x)"
        )


if __name__ == "__main__":
    main()
