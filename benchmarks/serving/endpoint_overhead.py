"""What the HTTP endpoint costs: one closed-loop workload at 1, 4 and 8 concurrent clients, sent
to the same engine in-process (``Engine.submit``, each token timed as the engine emits it) and
over HTTP (streamed /v1/completions from a client process on loopback, each token timed as its
chunk arrives), the two arms interleaved by round in the project's trial order. Prints TTFT and
ITL percentiles per arm and concurrency, and HTTP over in-process for TTFT p50 and TPOT p50
(paired by round, geometric mean; the issue's target is at most 1.05x).

The engine, the endpoint's server and the in-process clients share this process, as they do
in `compile-ahead serve`; the HTTP clients run in a child process (httpx, asyncio), so their
parsing is not charged to the server. Every request generates exactly --max-tokens tokens (EOS
does not stop it), so both arms decode the same work. Two cores shared with other work bound
every figure: run it on a quiet machine.

    python benchmarks/serving/endpoint_overhead.py --model qwen2.5-0.5b [--ladder 256,512]
        [--buckets 1,2,4,8] [--policy up-front] [--concurrency 1,4,8] [--requests 16]
        [--prompt-len 64] [--max-tokens 32] [--rounds 2] [--inference-precision f32]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import orders, ratio
from _shared.results import write_result

ARMS = ("in-process", "http")
PERCENTILES = (50, 90, 99)
MODEL_ID = "bench"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--ladder", default="64,128")
    p.add_argument("--buckets", default="1,2,4,8")
    p.add_argument("--policy", default="up-front")
    p.add_argument("--concurrency", default="1,4,8")
    p.add_argument("--requests", type=int, default=16, help="requests per arm and level")
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--inference-precision", default=None)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--client", nargs=3, metavar=("URL", "KEY", "C"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --- the HTTP arm's client process ---------------------------------------------------------
async def _http_clients(url: str, key: str, concurrency: int, prompts: list, n: int) -> list:
    import httpx

    todo = list(enumerate(prompts))
    timelines: list = [None] * len(prompts)
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def worker() -> None:
            while todo:
                i, prompt = todo.pop(0)
                body = {"model": MODEL_ID, "prompt": prompt, "max_tokens": n, "stream": True}
                sent, times = time.perf_counter(), []
                async with client.stream("POST", url, json=body, headers=headers) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: {"):
                            chunk = json.loads(line[6:])
                            times += [time.perf_counter()] * len(chunk["choices"][0]["token_ids"])
                timelines[i] = [t - sent for t in times]

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return timelines


def client_main(args: argparse.Namespace) -> None:
    url, key, c = args.client
    work = json.loads(sys.stdin.read())
    timelines = asyncio.run(_http_clients(url, key, int(c), work["prompts"], work["n"]))
    print(json.dumps(timelines))


# --- the two arms --------------------------------------------------------------------------
def in_process(engine, concurrency: int, prompts: list, n: int) -> list:
    todo = list(enumerate(prompts))
    timelines: list = [None] * len(prompts)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i, prompt = todo.pop(0)
            done, times = threading.Event(), []

            def on_event(event, times=times, done=done) -> None:
                if event.token is not None:
                    times.append(time.perf_counter())
                if event.finished is not None:
                    done.set()

            sent = time.perf_counter()
            engine.submit(f"bench-{i}-{sent}", prompt, n, on_event)
            done.wait(600)
            timelines[i] = [t - sent for t in times]

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return timelines


def over_http(url: str, key: str, concurrency: int, prompts: list, n: int) -> list:
    done = subprocess.run(
        [sys.executable, __file__, "--client", url, key, str(concurrency)],
        input=json.dumps({"prompts": prompts, "n": n}),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit("the HTTP client process failed")
    return json.loads(done.stdout)


# --- figures ---------------------------------------------------------------------------------
def figures(timelines: list) -> dict:
    """TTFT, ITL and TPOT of one arm's timelines (seconds after each request was sent)."""
    ttft = [t[0] for t in timelines if t]
    itl = [b - a for t in timelines for a, b in itertools.pairwise(t)]
    tpot = [(t[-1] - t[0]) / (len(t) - 1) for t in timelines if len(t) > 1]
    out: dict = {"requests": len(timelines), "tokens": sum(len(t) for t in timelines)}
    for name, values in (("ttft_s", ttft), ("itl_s", itl), ("tpot_s", tpot)):
        out[name] = {
            f"p{q}": float(np.percentile(values, q)) if values else None for q in PERCENTILES
        }
    return out


def start(args: argparse.Namespace):
    from compile_ahead.profiling.serving_http.app import Endpoint, EndpointSettings
    from compile_ahead.profiling.serving_http.auth import new_token
    from compile_ahead.profiling.serving_http.server import HttpServer, bind
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.ladder.settings.capacities import Ladder
    from compile_ahead.runtime.serving.api import ServingSettings, start_engine
    from compile_ahead.runtime.sources.resolve import resolve_model

    source = resolve_model(args.model)
    options = CompileOptions("CPU", args.inference_precision).resolved()
    sizes = tuple(int(b) for b in args.buckets.split(","))
    settings = ServingSettings(
        sizes,
        Ladder.parse(args.ladder).rungs,
        args.policy,
        None,
        {"options": options, "stop_at_eos": False},
    )
    engine = start_engine(source, settings)
    while not engine.status()["ready"]:
        time.sleep(0.05)
    token = new_token()
    endpoint = Endpoint(engine, EndpointSettings(MODEL_ID, token), source.config.vocab_size)
    server = HttpServer(
        endpoint, bind("127.0.0.1", 0), grace_s=5, max_connections=64, idle_timeout_s=30
    )
    server.start()
    return source, engine, server, f"http://127.0.0.1:{server.port}/v1/completions", token


def main() -> None:
    args = parse_args()
    if args.client:
        client_main(args)
        return
    levels = [int(c) for c in args.concurrency.split(",")]
    source, engine, server, url, token = start(args)
    rng = random.Random(0)
    vocab = source.config.vocab_size
    per_round: dict = {(arm, c): [] for arm in ARMS for c in levels}
    try:
        for r, arms in orders(list(ARMS), args.rounds):
            prompts = [
                [rng.randrange(1, vocab) for _ in range(args.prompt_len)]
                for _ in range(args.requests)
            ]
            for c in levels:
                for arm in arms:
                    if arm == "http":
                        lines = over_http(url, token, c, prompts, args.max_tokens)
                    else:
                        lines = in_process(engine, c, prompts, args.max_tokens)
                    per_round[(arm, c)].append(figures(lines))
                    print(f"round {r} c={c} {arm}: done", file=sys.stderr, flush=True)
    finally:
        server.stop(force=True)
        server.join(10)
        engine.drain(5)
    results = report(per_round, levels)
    if args.json is not None:
        print(f"result: {write_result(args.json, 'endpoint_overhead', results, args)}")


def report(per_round: dict, levels: list[int]) -> dict:
    results: dict = {"levels": {}}
    print(
        f"{'c':>2} {'arm':<10} {'TTFT p50/p90/p99 ms':>24} {'ITL p50/p90/p99 ms':>24} "
        f"{'TPOT p50 ms':>11}"
    )
    for c in levels:
        level: dict = {}
        for arm in ARMS:
            rounds = per_round[(arm, c)]
            mid = {
                k: float(np.median([f[k]["p50"] for f in rounds]))
                for k in ("ttft_s", "itl_s", "tpot_s")
            }
            tails = {
                k: {q: float(np.median([f[k][q] for f in rounds])) for q in ("p90", "p99")}
                for k in ("ttft_s", "itl_s")
            }
            level[arm] = {"rounds": rounds, "p50_median": mid, "tails_median": tails}

            def ms(k, mid=mid, tails=tails):
                return (
                    f"{mid[k] * 1e3:6.1f}/{tails[k]['p90'] * 1e3:6.1f}/{tails[k]['p99'] * 1e3:6.1f}"
                )

            print(
                f"{c:>2} {arm:<10} {ms('ttft_s'):>24} {ms('itl_s'):>24} {mid['tpot_s'] * 1e3:11.2f}"
            )
        for k in ("ttft_s", "tpot_s"):
            inproc = [f[k]["p50"] for f in per_round[("in-process", c)]]
            http = [f[k]["p50"] for f in per_round[("http", c)]]
            level[f"http_over_in_process_{k}_p50"] = ratio(inproc, http)
        print(
            f"{c:>2} HTTP / in-process: TTFT p50 {level['http_over_in_process_ttft_s_p50']:.3f}x"
            f", TPOT p50 {level['http_over_in_process_tpot_s_p50']:.3f}x"
        )
        results["levels"][str(c)] = level
    return results


if __name__ == "__main__":
    main()
