"""Our serving engine against openvino-genai's ContinuousBatchingPipeline on the same IR and the
same token-id requests, at N concurrent requests (N in 1, 2, 4, 8): TPOT p50 and output tokens
per second each, and what our static shapes pay for padding.

Each round serves N requests that all arrive at once (prompt ``--prompt`` random ids, exactly
``--new-tokens`` new tokens each, EOS ignored) on both arms, in an order rotated by round:

- ours: the serving engine on the IR (compile-ahead's graphs cut from it) with one bucket
  [N, C] compiled before the round (up-front; a round times serving, not compiling), its
  batch-1 prefill graph taking ``--prefill-chunk`` tokens per call (default: the engine's);
- the peer: ContinuousBatchingPipeline(ir, SchedulerConfig(), "CPU") made once, the N
  requests added with add_request and stepped while has_non_finished_requests(); a token's
  time is the end of the step() that produced it;
- one at a time: LLMPipeline generating the N requests in turn (what OVMS does on NPU), each
  request's TPOT from the pipeline's own per-token durations.

TPOT per request is (last token - first token) / (tokens - 1), as `vllm bench serve` has it;
tokens/s is all output tokens over the round's span. Padding: a static [N, C] step attends
over C slots whatever the rows hold, so the filled share of the slots it reads is printed (the
peer's paged attention reads only filled blocks). Both arms take the device's default
precisions. Two cores shared with other work bound every figure.

    python benchmarks/peers/serving_vs_cb.py --ir DIR [--concurrency 1,2,4,8] [--prompt 128]
        [--new-tokens 64] [--capacity 256] [--prefill-chunk N] [--rounds 3] [--json FILE]
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

from compile_ahead.runtime.serving.api import ServingSettings
from compile_ahead.runtime.serving.device_executor import device_engine
from compile_ahead.runtime.serving.engine import replay
from compile_ahead.runtime.serving.metrics import tpot_of
from compile_ahead.runtime.serving.requests import Request
from compile_ahead.runtime.sources.resolve import resolve_model

ARMS = ("ours", "cb", "serial")


def requests(n: int, prompt: int, new: int, vocab: int, seed: int) -> list[Request]:
    rng = np.random.default_rng(seed)
    return [
        Request(f"r{i}", tuple(int(t) for t in rng.integers(0, vocab, prompt)), new, 0.0)
        for i in range(n)
    ]


class Ours:
    def __init__(self, ir: Path, n: int, capacity: int, prefill_chunk: int | None):
        self.source = resolve_model(str(ir / "openvino_model.xml"))
        extra: dict = {"options": {}}
        if prefill_chunk is not None:
            extra["prefill_chunk"] = prefill_chunk
        settings = ServingSettings((n,), (capacity,), "up-front", None, extra)
        self.settings = settings

    def serve(self, batch: list[Request]) -> tuple[list[float], float]:
        engine = device_engine(self.source, self.settings)
        try:
            engine.start()  # the bucket's compile (cached after the first round): not timed
            t0 = time.perf_counter()
            replay(engine, batch)
            span = time.perf_counter() - t0
        finally:
            engine.executor.close()
        lives = list(engine.lives.values())
        tpots = [t for x in lives if (t := tpot_of(x)) is not None]
        return tpots, sum(len(x.tokens) for x in lives) / span


class Peer:
    def __init__(self, ir: Path):
        import openvino_genai as genai

        self.genai = genai
        self.pipe = genai.ContinuousBatchingPipeline(str(ir), genai.SchedulerConfig(), "CPU")

    def serve(self, batch: list[Request]) -> tuple[list[float], float]:
        import openvino as ov

        config = self.genai.GenerationConfig()
        config.max_new_tokens = batch[0].max_new_tokens
        config.ignore_eos = True
        t0 = time.perf_counter()
        handles = [
            self.pipe.add_request(i, ov.Tensor(np.array([r.prompt], np.int64)), config)
            for i, r in enumerate(batch)
        ]
        times: list[list[float]] = [[] for _ in batch]
        while self.pipe.has_non_finished_requests():
            self.pipe.step()
            now = time.perf_counter()
            for i, h in enumerate(handles):
                if h.can_read():
                    got = sum(len(o.generated_ids) for o in h.read().values())
                    times[i] += [now] * got
        span = time.perf_counter() - t0
        tpots = [(t[-1] - t[0]) / (len(t) - 1) for t in times if len(t) > 1]
        return tpots, sum(len(t) for t in times) / span


class Serial:
    """LLMPipeline taking one request at a time (what OVMS does on NPU): the N requests in
    turn; a request's TPOT from the pipeline's own per-token durations."""

    def __init__(self, ir: Path):
        import openvino_genai as genai

        self.genai = genai
        self.pipe = genai.LLMPipeline(str(ir), "CPU")

    def serve(self, batch: list[Request]) -> tuple[list[float], float]:
        import openvino as ov

        config = self.genai.GenerationConfig()
        config.max_new_tokens = batch[0].max_new_tokens
        config.ignore_eos = True
        config.do_sample = False
        t0 = time.perf_counter()
        tpots, tokens = [], 0
        for r in batch:
            ids = np.array([r.prompt], np.int64)
            inputs = self.genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
            out = self.pipe.generate(inputs, config)
            durations = list(out.perf_metrics.raw_metrics.m_durations)  # us per token
            tpots.append(median([d / 1e6 for d in durations]) if durations else float("nan"))
            tokens += r.max_new_tokens
        return tpots, tokens / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ir", type=Path, required=True, help="an optimum-intel export directory")
    p.add_argument("--concurrency", default="1,2,4,8")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--capacity", type=int, default=256)
    p.add_argument("--prefill-chunk", type=int, default=None, help="our prefill's tokens per call")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",")]
    if args.prompt + args.new_tokens > args.capacity:
        p.error("--prompt + --new-tokens must fit --capacity")
    peer, serial = Peer(args.ir), Serial(args.ir)
    ours = {n: Ours(args.ir, n, args.capacity, args.prefill_chunk) for n in levels}
    vocab = ours[levels[0]].source.config.vocab_size
    got: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for r, order in orders([(a, n) for n in levels for a in ARMS], args.rounds):
        for arm, n in order:
            batch = requests(n, args.prompt, args.new_tokens, vocab, args.seed + r)
            server = ours[n] if arm == "ours" else peer if arm == "cb" else serial
            tpots, rate = server.serve(batch)
            got.setdefault((arm, n), []).append((median(tpots), rate))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    filled = (args.prompt + args.new_tokens / 2) / args.capacity
    results = {}
    print(f"\n{args.ir}: prompt {args.prompt}, {args.new_tokens} new tokens, C={args.capacity}")
    for n in levels:
        med = {
            arm: (median([x[0] for x in got[(arm, n)]]), median([x[1] for x in got[(arm, n)]]))
            for arm in ARMS
        }
        (tpot_o, rate_o), (tpot_c, rate_c), (tpot_s, rate_s) = (med[a] for a in ARMS)
        results[n] = {arm: {"tpot_p50_s": t, "tokens_per_s": r} for arm, (t, r) in med.items()}
        results[n]["tpot_ratio_cb"] = tpot_o / tpot_c
        print(
            f"  N={n}: TPOT p50 ours {tpot_o * 1e3:.1f} ms, CB {tpot_c * 1e3:.1f} ms "
            f"({tpot_o / tpot_c:.2f}x), one at a time {tpot_s * 1e3:.1f} ms; tokens/s ours "
            f"{rate_o:.1f}, CB {rate_c:.1f}, one at a time {rate_s:.1f}"
        )
    print(f"  padding: a [N, {args.capacity}] step reads {filled:.0%} filled slots on average")
    if args.json is not None:
        print(f"result: {write_result(args.json, 'serving_vs_cb', results, args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
