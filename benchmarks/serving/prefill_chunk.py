"""What a prefill call costs by its shape: the serving engine's batch-1 prefill graph at
several chunks (tokens per call), and batched [B, chunk] graphs, each at one capacity, so the
cost per prompt token can be read side by side.

Every graph is compiled first (the compile is not timed); then each round calls every graph
once, in an order rotated by round (the project's trial design), with random ids and every
row's past length 0 (a prompt's first call). A call's time is its infer and the reads of its
outputs (``Step.run``). Printed per shape: the median call, the median per token, and how
many calls of the shape a ``--prompt``-token prompt takes (per row for a batched shape) and
what they cost.

    python benchmarks/serving/prefill_chunk.py --model M [--capacity 256]
        [--chunks 16,32,64,128] [--batched 8x16] [--prompt 128] [--rounds 7] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import median, orders
from _shared.results import write_result

from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.model.kv_arena import KVArena
from compile_ahead.runtime.sources.resolve import resolve_model

WARM_CALLS = 2  # calls per graph before the timed rounds


def shapes(chunks: str, batched: str) -> list[tuple[int, int]]:
    """(batch, chunk) pairs: the batch-1 chunks, then each BxL of ``batched``."""
    found = [(1, int(c)) for c in chunks.split(",") if c]
    for item in (x for x in batched.split(",") if x):
        b, _, chunk = item.partition("x")
        found.append((int(b), int(chunk)))
    if not found or any(b < 1 or c < 1 for b, c in found):
        raise SystemExit("give chunks and batched shapes of whole numbers >= 1")
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a model as `compile-ahead run` takes it")
    p.add_argument("--capacity", type=int, default=256)
    p.add_argument("--chunks", default="16,32,64,128", help="batch-1 chunks")
    p.add_argument("--batched", default="8x16", help="batched shapes BxL (comma-separated)")
    p.add_argument("--prompt", type=int, default=128, help="the prompt length costs are for")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    source = resolve_model(args.model)
    options = CompileOptions().resolved()
    rng = np.random.default_rng(0)
    graphs = {}
    for b, chunk in shapes(args.chunks, args.batched):
        if chunk > args.capacity:
            p.error(f"chunk {chunk} exceeds --capacity {args.capacity}")
        spec = GraphSpec(args.capacity, chunk, "f32", batch=b)
        step = compile_step(source, spec, options).step
        arena = KVArena(source.config, args.capacity, "f32", b)
        step.bind(arena)
        ids = rng.integers(0, source.config.vocab_size, (b, chunk) if b > 1 else chunk)
        past = np.zeros(b, np.int64) if b > 1 else 0
        graphs[(b, chunk)] = (step, arena, ids, past)
        for _ in range(WARM_CALLS):
            step.run(ids, past, chunk - 1)
    times: dict[tuple[int, int], list[float]] = {shape: [] for shape in graphs}
    for _, order in orders(list(graphs), args.rounds):
        for shape in order:
            step, _, ids, past = graphs[shape]
            t0 = time.perf_counter()
            step.run(ids, past, shape[1] - 1)
            times[shape].append(time.perf_counter() - t0)
    print(f"{source.label}: capacity {args.capacity}, {args.rounds} rounds, prompt {args.prompt}")
    results = []
    for (b, chunk), seen in times.items():
        call = median(seen)
        calls = -(-args.prompt // chunk)  # per row: a batched call prefills B prompts at once
        per_prompt = call * calls / b
        results.append(
            {"batch": b, "chunk": chunk, "call_s": call, "per_token_s": call / (b * chunk),
             "prompt_s": per_prompt}
        )  # fmt: skip
        print(
            f"  [{b}, {chunk}]: call {call * 1e3:.1f} ms, {call / (b * chunk) * 1e3:.2f} ms per "
            f"token; a {args.prompt}-token prompt {calls} call(s), {per_prompt * 1e3:.1f} ms"
            + (f" (of {b} prefilled together)" if b > 1 else "")
        )
    for _, arena, _, _ in graphs.values():
        arena.close()
    if args.json is not None:
        print(f"result: {write_result(args.json, 'prefill_chunk', results, args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
