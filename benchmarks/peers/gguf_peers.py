"""Our ladder against openvino-genai's LLMPipeline and llama.cpp on the same GGUF file: load to
first token, decode per token and peak RSS, each arm in a fresh process, rounds interleaved
(the project's round order).

- ours: a `run` of --schedule on --ladder (default b0 on one 1024-slot rung) from --ours-model
  (default: the GGUF itself), greedy from the prompt's ids: load to first token is the
  report's first_token_s counted from the child's start (imports included, as for the peers),
  decode per token its decode time over the tokens decoded.
- genai: `LLMPipeline(path.gguf, "CPU")`, the same ids as TokenizedInputs, greedy with EOS
  ignored: load to first token is the pipeline's construction plus its TTFT, decode per token
  its TPOT.
- llama.cpp: llama-cpp-python's `Llama(model_path=..., n_threads=2)`, the same ids, greedy
  (temperature 0) with EOS masked: load to first token and the mean gap between later tokens.
  Its weights stay in the GGUF's layout (no repacked or AMX buffers: see
  --llamacpp-extra-buffers).
Peak RSS: each child's own maximum resident set (getrusage).

    python benchmarks/peers/gguf_peers.py --rounds 3 --steps 200 --json gguf_peers.json
    python benchmarks/peers/gguf_peers.py --ours-model CHECKPOINT \\
        --arms ours,genai --rounds 1 --steps 16   # a small check
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _shared.common import median, orders
from _shared.models import smollm2_gguf
from _shared.results import write_result

ARMS = ("ours", "genai", "llamacpp")


def prompt_ids(n: int, vocab: int, seed: int = 7) -> list[int]:
    """A fixed prompt of ``n`` ids drawn from the vocabulary (timing does not read them)."""
    import random

    rng = random.Random(seed)
    return [rng.randrange(100, vocab - 100) for _ in range(n)]


def run_ours(args: argparse.Namespace, ids: list[int], start_ns: int) -> dict[str, float]:
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.ladder.runner import run_ladder
    from compile_ahead.runtime.ladder.settings.capacities import Ladder
    from compile_ahead.runtime.ladder.settings.config import Prompt, RunConfig
    from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
    from compile_ahead.runtime.sources.resolve import resolve_model

    source = resolve_model(args.ours_model or args.gguf)
    config = RunConfig(
        SCHEDULES[args.schedule],
        Ladder.parse(args.ladder),
        Prompt(ids=",".join(map(str, ids)), stop_at_eos=False),
        decode_tokens=args.steps,
        options=CompileOptions(cache=None),
        started_ns=start_ns,
    )
    report = run_ladder(source, config).report
    assert report.first_token_s is not None
    return {
        "load_to_first_token_s": report.first_token_s,
        "decode_ms_per_token": 1e3 * report.decode_s / max(1, report.tokens_decoded),
    }


def run_genai(args: argparse.Namespace, ids: list[int], start: float) -> dict[str, float]:
    import numpy as np
    import openvino as ov
    import openvino_genai as genai

    pipe = genai.LLMPipeline(str(args.gguf), "CPU")
    loaded = time.perf_counter()
    cfg = genai.GenerationConfig()
    cfg.max_new_tokens = args.steps + 1
    cfg.ignore_eos = True
    tokens = np.asarray([ids], np.int64)
    inputs = genai.TokenizedInputs(ov.Tensor(tokens), ov.Tensor(np.ones_like(tokens)))
    metrics = pipe.generate(inputs, cfg).perf_metrics
    return {
        "load_to_first_token_s": loaded - start + metrics.get_ttft().mean / 1e3,
        "decode_ms_per_token": metrics.get_tpot().mean,
    }


def without_extra_buffers() -> None:
    """llama.cpp loads the weights without its extra CPU buffer types (the repacked and AMX
    layouts): with them, llama-cpp-python 0.3.36 built here crashes (SIGSEGV) in the first
    llama_decode. Llama() takes its model parameters from llama_model_default_params, which
    is wrapped here to turn them off."""
    import llama_cpp
    import llama_cpp.llama as llama_module

    defaults = llama_cpp.llama_model_default_params

    def params():  # type: ignore[no-untyped-def]
        p = defaults()
        p.use_extra_bufts = False
        return p

    llama_module.llama_cpp.llama_model_default_params = params


def run_llamacpp(args: argparse.Namespace, ids: list[int], start: float) -> dict[str, float]:
    from llama_cpp import Llama

    if not args.llamacpp_extra_buffers:
        without_extra_buffers()

    llm = Llama(
        model_path=str(args.gguf),
        n_threads=args.threads,
        n_ctx=int(args.ladder.split(",")[-1]),
        verbose=False,
    )
    stamps: list[float] = []
    stream = llm.create_completion(
        ids,
        max_tokens=args.steps + 1,
        temperature=0.0,
        logit_bias={llm.token_eos(): float("-inf")},
        stream=True,
    )
    for _ in stream:
        stamps.append(time.perf_counter())
    return {
        "load_to_first_token_s": stamps[0] - start,
        "decode_ms_per_token": 1e3 * (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1),
    }


def child_main(args: argparse.Namespace) -> None:
    """One arm's run in this fresh process; its figures as the last line of stdout."""
    start = time.perf_counter()
    start_ns = time.monotonic_ns()
    ids = json.loads(args.ids)
    runner = {"ours": run_ours, "genai": run_genai, "llamacpp": run_llamacpp}[args.one]
    clock: Any = start_ns if args.one == "ours" else start
    got = runner(args, ids, clock)
    got["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(got))


def vocab_size(gguf: Path) -> int:
    import gguf as gguf_reader

    reader = gguf_reader.GGUFReader(str(gguf))
    tokens = reader.fields["tokenizer.ggml.tokens"]
    return len(tokens.data)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--gguf", type=Path, default=None, help="the GGUF every peer loads (default: SmolLM2-135M)"
    )
    p.add_argument("--ours-model", default=None, help="our model (default: the GGUF itself)")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--schedule", default="b0")
    p.add_argument("--ladder", default="1024")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=200, help="decode steps after the first token")
    p.add_argument("--threads", type=int, default=2, help="llama.cpp's n_threads")
    p.add_argument(
        "--llamacpp-extra-buffers",
        action="store_true",
        help="let llama.cpp use its repacked/AMX weight buffers (off by default: llama-cpp-python "
        "0.3.36 crashes with them on a Sapphire Rapids VM)",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, default=None, help="write the result file here")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a child's arm
    p.add_argument("--ids", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.gguf = args.gguf or smollm2_gguf()
    if args.one:
        child_main(args)
        return
    ids = prompt_ids(args.prompt_len, vocab_size(args.gguf))
    arms = [a for a in args.arms.split(",") if a]
    figures: dict[str, list[dict[str, float]]] = {a: [] for a in arms}
    base = [sys.executable, __file__, "--gguf", str(args.gguf), "--ids", json.dumps(ids)]
    base += ["--schedule", args.schedule, "--ladder", args.ladder, "--steps", str(args.steps)]
    base += ["--threads", str(args.threads)]
    if args.llamacpp_extra_buffers:
        base.append("--llamacpp-extra-buffers")
    if args.ours_model:
        base += ["--ours-model", args.ours_model]
    for r, order in orders(arms, args.rounds):
        for arm in order:
            done = subprocess.run([*base, "--one", arm], capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{arm} failed in round {r}:\n{done.stderr[-3000:]}")
            figures[arm].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {r} {arm}: {figures[arm][-1]}", flush=True)
    keys = ("load_to_first_token_s", "decode_ms_per_token", "peak_rss_mib")
    summary = {a: {k: median([f[k] for f in figures[a]]) for k in keys} for a in arms}
    print("\n| Arm | Load to first token | Decode per token | Peak RSS |\n|---|---|---|---|")
    for arm, s in summary.items():
        print(
            f"| {arm} | {s['load_to_first_token_s']:.2f} s | {s['decode_ms_per_token']:.2f} ms "
            f"| {s['peak_rss_mib']:.0f} MiB |"
        )
    if "ours" in summary:
        for peer in (a for a in arms if a != "ours"):
            ratios = {k: summary["ours"][k] / summary[peer][k] for k in keys}
            print(f"ours / {peer}: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    if args.json:
        write_result(args.json, "gguf_peers", {"rounds": figures, "medians": summary}, args)


if __name__ == "__main__":
    main()
