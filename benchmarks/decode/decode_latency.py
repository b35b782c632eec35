"""Decode-step latency of our static graph against the plain-CPU stateful model, same weights.

Interleaved in one process: each round times a few steps of every variant at context ~C for
C in {1024, 8192}, so machine drift hits all variants alike. Also compile time and the RSS each
compiled capacity adds. Prints medians and the ratios (target: static / stateful <= 1.0x,
<= 1.2 GB RSS per compiled 0.5B graph).

    python benchmarks/decode/decode_latency.py [--model qwen2.5-0.5b] [--rounds 5] [--steps 8]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import openvino as ov

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import orders

from compile_ahead.runtime.base.measure import rss_bytes
from compile_ahead.runtime.base.precision import STORAGE_DTYPES, f32_to_bf16_bits
from compile_ahead.runtime.baselines.cpu_dynamic import compile_dynamic_cpu
from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.model.kv_arena import KVArena
from compile_ahead.runtime.sources.resolve import resolve_model


def fill_random(arena: KVArena, length: int, rng: np.random.Generator) -> None:
    """Attention cost does not depend on values: random K/V stand in for a real history."""
    for a in arena.keys + arena.values:
        vals = rng.standard_normal(a[:, :, :length].shape).astype(np.float32)
        a[:, :, :length] = f32_to_bf16_bits(vals) if a.dtype == np.uint16 else vals.astype(a.dtype)


class StaticVariant:
    def __init__(self, source, capacity: int, options: CompileOptions, context: int):
        before = rss_bytes()
        result = compile_step(source, GraphSpec(capacity, 1, options.kv_precision), options)
        self.compile_s = result.compile_s
        self.step = result.step
        self.rss_added = rss_bytes() - before  # the compiled graph alone, before any KV
        self.arena = KVArena(source.config, capacity, options.kv_precision)
        fill_random(self.arena, context, np.random.default_rng(0))
        self.step.bind(self.arena)
        self.context = context

    def time_steps(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            self.step.run(np.asarray([11], np.int64), self.context)
            out.append(time.perf_counter() - t0)
        return out


class StatefulVariant:
    """The stateful model with its state set to a random history of `context` tokens."""

    def __init__(self, runner, source, context: int, kv_dtype: np.dtype):
        self.runner = runner
        self.context = context
        self.cfg = source.config
        rng = np.random.default_rng(1)
        shape = (1, self.cfg.num_kv_heads, context, self.cfg.head_dim)
        self.history = rng.standard_normal(shape).astype(np.float32)

    def time_steps(self, n: int) -> list[float]:
        request = self.runner.compiled.create_infer_request()
        for state in request.query_state():
            state.state = ov.Tensor(self.history)
        out = []
        for i in range(n):
            past = self.context + i
            feed = {
                "input_ids": np.asarray([[11]], np.int64),
                "attention_mask": np.ones((1, past + 1), np.int64),
                "position_ids": np.asarray([[past]], np.int64),
                "beam_idx": np.zeros(1, np.int32),
            }
            t0 = time.perf_counter()
            request.infer(feed)
            out.append(time.perf_counter() - t0)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--contexts", default="1024,8192")
    args = ap.parse_args()
    source = resolve_model(args.model)
    options = CompileOptions("CPU").resolved()
    print(
        f"model: {source.label}; device CPU, inference {options.inference_precision}, "
        f"KV {options.kv_precision}"
    )
    contexts = [int(c) for c in args.contexts.split(",")]
    for name in source.weights.names():  # synthetic weights are made lazily: not per graph
        source.weights.get(name)

    variants: dict[str, object] = {}
    for c in contexts:
        v = StaticVariant(source, c, options, c - 24)
        variants[f"static C={c}"] = v
        print(f"compiled static C={c}: {v.compile_s:.2f} s, +{v.rss_added / 2**30:.2f} GiB RSS")
    before = rss_bytes()
    runner = compile_dynamic_cpu(source)
    print(
        f"compiled stateful (dynamic shapes): {runner.compile_s:.2f} s, "
        f"+{(rss_bytes() - before) / 2**30:.2f} GiB RSS"
    )
    for c in contexts:
        variants[f"stateful ctx={c}"] = StatefulVariant(
            runner, source, c - 24, STORAGE_DTYPES[options.kv_precision]
        )
    gc.collect()

    times: dict[str, list[float]] = {k: [] for k in variants}
    for _, order in orders(list(variants), args.rounds):
        for name in order:
            steps = variants[name].time_steps(args.steps + 1)[1:]  # first step warms caches
            times[name].append(statistics.median(steps))
    print(f"\nmedian decode step over {args.rounds} interleaved rounds x {args.steps} steps:")
    for name, ts in times.items():
        print(f"  {name:<22} {1e3 * statistics.median(ts):7.1f} ms")
    print("\nratios (static / stateful, same context; target <= 1.0x):")
    for c in contexts:
        pairs = [
            a / b for a, b in zip(times[f"static C={c}"], times[f"stateful ctx={c}"], strict=True)
        ]
        rounds = ", ".join(f"{p:.2f}" for p in pairs)
        print(f"  C={c}: {statistics.median(pairs):.3f}x (per round: {rounds})")
    for c in contexts:
        v = variants[f"static C={c}"]
        print(f"RSS per compiled capacity C={c}: {v.rss_added / 2**30:.2f} GiB (target <= 1.2 GB)")


if __name__ == "__main__":
    main()
