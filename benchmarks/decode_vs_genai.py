"""Decode per token only: our rung graph against openvino-genai's LLMPipeline on the same
optimum-intel IR, alternating every round in one process.

ir_vs_genai.py times each arm's decode right after its own prefill of a new prompt, two pairs
at C=4096. Here nothing but decode is timed, many times: our rung steps after its KV store is
filled with random rows up to the context (the values do not change the work), and
LLMPipeline generates from one repeated prompt of that length, so its prefix cache serves the
prefill and its time per output token (perf metrics, the tokens after the first) is decode
alone. Each round runs both arms, in alternating order; the ratio is ours / LLMPipeline per
round, then the median.

    python benchmarks/decode_vs_genai.py [--workdir DIR] [--formats fp16,int8,int4]
        [--rounds 16] [--points 1024:128,4096:3800]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
from pathlib import Path

from compile_ahead.runtime.compile.options import CompileOptions

sys.path.insert(0, str(Path(__file__).parent))
from ir_exports import FORMATS, prepare  # a sibling script
from ir_vs_genai import Genai, Ours, fill_random, prompt_ids  # a sibling script

STEPS = 24  # tokens per round and arm


def alternate(
    ours: Ours, gen: Genai, prompt: list[int], context: int, rounds: int
) -> tuple[list[float], list[float]]:
    """ms per token of each arm, one value per round, the order alternating by round."""
    a: list[float] = []
    b: list[float] = []
    for r in range(rounds):
        for arm in ("ours", "genai") if r % 2 == 0 else ("genai", "ours"):
            if arm == "ours":
                a.append(ours.decode_ms(context, STEPS))
            else:
                b.append(gen.run(prompt, STEPS + 1)[1])
    return a, b


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=Path("bench-out/ir-vs-genai"))
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--points", default="1024:128,4096:3800", help="capacity:context pairs")
    args = p.parse_args(argv)
    formats = tuple(args.formats.split(","))
    dirs = prepare(args.workdir, formats)
    options = CompileOptions().resolved()
    points = [tuple(int(x) for x in point.split(":")) for point in args.points.split(",")]
    print(f"device CPU, inference {options.inference_precision}, our KV {options.kv_precision}")
    for fmt in formats:
        for capacity, context in points:
            ours = Ours(dirs[fmt], capacity, options, prefill=False)
            fill_random(ours.arena, context)
            gen = Genai(dirs[fmt])
            prompt = prompt_ids(context, ours.source.config.vocab_size, seed=7)
            gen.run(prompt, 2)  # its prefix cache now holds the prompt
            a, b = alternate(ours, gen, prompt, context, args.rounds)
            ratios = [x / y for x, y in zip(a, b, strict=True)]
            print(
                f"{fmt} C={capacity} context {context}: ours {statistics.median(a):.2f} ms, "
                f"LLMPipeline {statistics.median(b):.2f} ms, ratio {statistics.median(ratios):.3f}"
                f" (rounds {min(ratios):.3f}-{max(ratios):.3f}, "
                f"{sum(x < 1 for x in ratios)}/{len(ratios)} under 1)",
                flush=True,
            )
            del ours, gen
            gc.collect()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
