"""Decode per token only: our rung graph against openvino-genai's LLMPipeline on the same
optimum-intel IR, alternating every round, with the arms' construction order balanced.

ir_vs_genai.py times each arm's decode right after its own prefill of a new prompt, two pairs
at C=4096. Here nothing but decode is timed, many times: our rung steps after its KV store is
filled with random rows up to the context (the values do not change the work), and
LLMPipeline generates from one repeated prompt of that length, so its prefix cache serves the
prefill and its time per output token (perf metrics, the tokens after the first) is decode
alone. Each round runs both arms, in alternating order; the ratio is ours / LLMPipeline per
round.

Which arm compiles first in a process matters: the model compiled first decodes slower for
the whole process (FP16 IR, C=1024, context 128: a second compile of the same graph stepped
1.04-1.09x faster than the first in each of about fifteen processes, and LLMPipeline built
after our rung gained as much). So each point runs in two fresh processes, one building our
rung first and one LLMPipeline first, half the rounds each; the figure is the median over all
rounds, and each order's median is printed beside it.

    python benchmarks/peers/decode_vs_genai.py [--workdir DIR] [--formats fp16,int8,int4]
        [--rounds 16] [--points 1024:128,4096:3800]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import fresh_json, median, orders, ratio
from _shared.genai_arms import Genai, Ours, build_arms, fill_random, prompt_ids
from _shared.models import FORMATS, prepare

from compile_ahead.runtime.compile.settings.options import CompileOptions

STEPS = 24  # tokens per round and arm
ORDERS = ("ours", "genai")  # which arm a worker process builds first


def alternate(
    ours: Ours, gen: Genai, prompt: list[int], context: int, rounds: int
) -> tuple[list[float], list[float]]:
    """ms per token of each arm, one value per round, the order alternating by round."""
    a: list[float] = []
    b: list[float] = []
    for _, order in orders(("ours", "genai"), rounds):
        for arm in order:
            if arm == "ours":
                a.append(ours.decode_ms(context, STEPS))
            else:
                b.append(gen.run(prompt, STEPS + 1)[1])
    return a, b


def worker(model_dir: Path, capacity: int, context: int, first: str, rounds: int) -> dict:
    """One point in this process, ``first`` built first: each arm's ms per round."""
    options = CompileOptions().resolved()
    make_ours = partial(Ours, model_dir, capacity, options, prefill=False)
    ours, gen = build_arms(first == "ours", make_ours, model_dir)
    fill_random(ours.arena, context)
    prompt = prompt_ids(context, ours.source.config.vocab_size, seed=7)
    gen.run(prompt, 2)  # its prefix cache now holds the prompt
    a, b = alternate(ours, gen, prompt, context, rounds)
    del ours, gen
    gc.collect()
    return {"ours": a, "genai": b}


def run_worker(model_dir: Path, capacity: int, context: int, first: str, rounds: int) -> dict:
    command = [
        sys.executable, __file__, "--worker", str(model_dir), "--point", f"{capacity}:{context}",
        "--first", first, "--rounds", str(rounds),
    ]  # fmt: skip
    return fresh_json(command)


def ratios(result: dict) -> list[float]:
    return [x / y for x, y in zip(result["ours"], result["genai"], strict=True)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=Path("bench-out/ir-vs-genai"))
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--rounds", type=int, default=16, help="per point, split between the orders")
    p.add_argument("--points", default="1024:128,4096:3800", help="capacity:context pairs")
    p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--point", help=argparse.SUPPRESS)
    p.add_argument("--first", choices=ORDERS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is not None:
        capacity, context = (int(x) for x in args.point.split(":"))
        print(json.dumps(worker(args.worker, capacity, context, args.first, args.rounds)))
        return 0
    formats = tuple(args.formats.split(","))
    dirs = prepare(args.workdir, formats)
    options = CompileOptions().resolved()
    points = [tuple(int(x) for x in point.split(":")) for point in args.points.split(",")]
    half = max(1, args.rounds // 2)
    print(f"device CPU, inference {options.inference_precision}, our KV {options.kv_precision}")
    for fmt in formats:
        for capacity, context in points:
            by_order = {
                first: run_worker(dirs[fmt], capacity, context, first, half) for first in ORDERS
            }
            a = [x for r in by_order.values() for x in r["ours"]]
            b = [x for r in by_order.values() for x in r["genai"]]
            every = [x for r in by_order.values() for x in ratios(r)]
            per_order = ", ".join(
                f"{first} built first {ratio(r['genai'], r['ours']):.3f}"
                for first, r in by_order.items()
            )
            print(
                f"{fmt} C={capacity} context {context}: ours {median(a):.2f} ms, "
                f"LLMPipeline {median(b):.2f} ms, ratio {ratio(b, a):.3f}"
                f" (rounds {min(every):.3f}-{max(every):.3f}, "
                f"{sum(x < 1 for x in every)}/{len(every)} under 1; {per_order})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
