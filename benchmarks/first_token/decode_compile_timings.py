"""When the first rung's decode graph compiles (`--decode-compile`), side by side: the first
token against the decode graph being ready, for a short and a long prompt.

Each sample is a fresh `compile-ahead run` process with no compile cache (every graph really
compiled), greedy from a random prompt of the given length, a few tokens; the timings rotate
their order each round, after an untimed warm-up run (--warmup): the first process to read a
model after a while reads it from disk, which would fall on round 1's first timing. Printed
per timing (medians over rounds, seconds from the command's start): the first token
(`first_token_s`), how long the first decode step then waited for its graph
(`decode_graph_wait_s`), and their sum (the decode graph taken into use: the second token
follows one step later), and the run's foreground compile.

    python benchmarks/first_token/decode_compile_timings.py --model CKPT_OR_IR \
        [--prompt-lens 128,3800] [--ladder 1024,2048,4096] [--schedule i2] [--rounds 3] [--warmup 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import run_checked

from compile_ahead.runtime.compile.settings.modes import DecodeCompile, choices
from compile_ahead.runtime.sources.resolve import resolve_model

FIELDS = ("first_token_s", "decode_graph_wait_s", "foreground_compile_s")


def one_run(args: argparse.Namespace, prompt: list[int], timing: str, out: Path) -> dict:
    cmd = [sys.executable, "-m", "compile_ahead.commands", "run", "--model", args.model]
    cmd += ["--schedule", args.schedule, "--ladder", args.ladder, "--no-cache"]
    cmd += ["--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens", "4"]
    cmd += ["--decode-compile", timing, "--report", str(out)]
    run_checked(cmd)
    report = json.loads(out.read_text())
    return {k: float(report[k]) for k in FIELDS}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a checkpoint directory or an IR")
    p.add_argument("--prompt-lens", default="128,3800")
    p.add_argument("--ladder", default="1024,2048,4096")
    p.add_argument("--schedule", default="i2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="untimed runs before the rounds")
    args = p.parse_args(argv)
    timings = list(choices(DecodeCompile))
    rng = np.random.default_rng(0)
    vocab = resolve_model(args.model).config.vocab_size
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.warmup):
            one_run(args, [1] * 8, timings[0], Path(tmp) / "r.json")
        for length in (int(x) for x in args.prompt_lens.split(",")):
            got: dict[str, list[dict]] = defaultdict(list)
            for r in range(args.rounds):
                prompt = [int(t) for t in rng.integers(0, min(vocab, 20000), length)]
                for timing in timings[r % len(timings) :] + timings[: r % len(timings)]:
                    got[timing].append(one_run(args, prompt, timing, Path(tmp) / "r.json"))
            print(f"prompt {length} tokens, {args.schedule} on {args.ladder}, {args.rounds} rounds")
            for timing in timings:
                rows = got[timing]

                def med(key: str, rows: list[dict] = rows) -> float:
                    return statistics.median(row[key] for row in rows)

                ready = statistics.median(
                    row["first_token_s"] + row["decode_graph_wait_s"] for row in rows
                )
                print(
                    f"  {timing:<19} first token {med('first_token_s'):5.2f} s, then waited "
                    f"{med('decode_graph_wait_s'):5.2f} s: decode graph in use at {ready:5.2f} s; "
                    f"foreground compile {med('foreground_compile_s'):5.2f} s"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
