"""The seed's replicated experiment: I1 (eager copy-and-grow) vs I2 (one-ahead JIT), N=5 paired
runs in counterbalanced order, on Qwen2.5-0.5B with a 128-token prompt.

    python benchmarks/ab_schedule_seed.py                       # full 1K->8K ladder, 8064 tokens
    python benchmarks/ab_schedule_seed.py --ladder 256,512,1024,2048   # scaled ladder

Add --baselines to put OpenVINO's NPU LLM pipeline (pyramid off/on) in the same table
(a four-arm Williams design; use a ladder whose top is at least 2048 so the pyramid has
more than one variant).
"""

from __future__ import annotations

import argparse
import sys

from compile_ahead.commands.main import main as cli_main


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-0.5b")
    p.add_argument("--ladder", default="1024,2048,4096,8192")
    p.add_argument("--prompt-len", default="128")
    p.add_argument("--pairs", default="5")
    p.add_argument("--warmup", default="0")
    p.add_argument("--baselines", action="store_true")
    p.add_argument("--out", default="ab-results/schedule-seed")
    args = p.parse_args()
    arms = "i1,i2,npuw-b0,npuw-b1" if args.baselines else "i1,i2"
    return cli_main(
        ["ab", "schedule", "--model", args.model, "--arms", arms, "--ladder", args.ladder,
         "--prompt-len", args.prompt_len, "--pairs", args.pairs, "--warmup", args.warmup,
         "--out", args.out]
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
