"""Whether decoding on the paged prefill graph while the first rung compiles pays here.

After the first token on the CPU, the runtime waits for the first rung's decode graph
(`--decode-compile after-prefill`). The paged prefill graph (runtime/graphs/ir/paged_prefill.py)
can step one token at a time too, so it could carry decode until the rung is ready. Two arms,
each in a fresh process, alternating: "wait" compiles the rung and then decodes on it;
"bridge" compiles it on a thread while decoding on the paged graph, and moves to the rung
when it is ready. Both start from the same context (random K/V rows: the values do not change
the work) and decode the same number of tokens. Printed per arm (medians, seconds from the
first token): when the rung was ready, when the 16th/32nd/64th/last token came, and how many
tokens the bridge carried.

    python benchmarks/first_token/decode_during_compile.py --model CKPT_OR_IR [--capacity 1024]
        [--context 128] [--tokens 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import fresh_json, median, orders
from _shared.genai_arms import decode_step, fill_random

from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.ladder.settings.prefill_plan import choose_prefill
from compile_ahead.runtime.model.kv_arena import KVArena
from compile_ahead.runtime.sources.resolve import resolve_model

ARMS = ("wait", "bridge")
MARKS = (16, 32, 64)


def one_arm(model: str, arm: str, capacity: int, context: int, tokens: int) -> dict:
    source = resolve_model(model)
    options = CompileOptions().resolved()
    kv = options.kv_precision
    arena = KVArena(source.config, capacity, kv)
    paged_spec = choose_prefill("CPU", capacity, capacity, shape="paged").spec(capacity, kv)
    paged = compile_step(source, paged_spec, options).step
    paged.bind(arena)
    fill_random(arena, context)

    def compile_rung():
        rung = compile_step(source, GraphSpec(capacity, 1, kv), options).step
        rung.bind(arena)
        return rung

    t0 = time.perf_counter()  # the first token
    times: list[float] = []
    token, position, bridged = 11, context, 0
    if arm == "wait":
        rung = compile_rung()
    else:
        box: dict = {}
        worker = threading.Thread(target=lambda: box.setdefault("rung", compile_rung()))
        worker.start()
        while "rung" not in box and len(times) < tokens:
            token = decode_step(paged, arena, token, position)
            position += 1
            times.append(time.perf_counter() - t0)
        worker.join()
        rung, bridged = box["rung"], len(times)
    ready = time.perf_counter() - t0
    while len(times) < tokens:
        token = decode_step(rung, arena, token, position)
        position += 1
        times.append(time.perf_counter() - t0)
    marks = {f"token {m}": times[m - 1] for m in MARKS if m <= tokens}
    return {"rung ready": ready, **marks, f"token {tokens}": times[-1], "bridged": bridged}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a checkpoint directory or an IR")
    p.add_argument("--capacity", type=int, default=1024)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # one arm, in this process
    args = p.parse_args(argv)
    if args.arm is not None:
        print(json.dumps(one_arm(args.model, args.arm, args.capacity, args.context, args.tokens)))
        return 0
    got: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    for _, order in orders(ARMS, args.rounds):
        for arm in order:
            command = [sys.executable, __file__, "--model", args.model, "--arm", arm]
            command += ["--capacity", str(args.capacity), "--context", str(args.context)]
            command += ["--tokens", str(args.tokens)]
            got[arm].append(fresh_json(command))
    print(f"C={args.capacity}, context {args.context}, {args.tokens} tokens, {args.rounds} rounds")
    for arm, rows in got.items():
        parts = ", ".join(
            f"{key} {median([row[key] for row in rows]):.2f}" + ("" if key == "bridged" else " s")
            for key in rows[0]
            if arm == "bridge" or key != "bridged"
        )
        print(f"  {arm:<6} {parts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
