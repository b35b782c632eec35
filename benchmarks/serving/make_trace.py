"""A seeded request file for the serving benchmarks (`compile-ahead serve --requests FILE`):
Poisson or gamma arrivals at a rate for a number of minutes, prompt and output lengths uniform
or lognormal, prompt ids uniform over the vocabulary. The same seed writes the same file.

    python benchmarks/serving/make_trace.py --out trace.jsonl [--minutes 10] [--rate 0.5]
        [--arrivals poisson|gamma] [--cv 2] [--prompt lognormal:256:0.8]
        [--output lognormal:128:0.8] [--vocab 151936] [--max-slots 1024] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compile_ahead.runtime.serving.workloads import (
    Arrivals,
    Lengths,
    generate_requests,
    write_requests,
)


def lengths(text: str) -> Lengths:
    """KIND:A[:B]: fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA."""
    kind, *values = text.split(":")
    numbers = [float(v) for v in values] + [0.0]
    return Lengths(kind, numbers[0], numbers[1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--rate", type=float, default=0.5, help="requests per second")
    p.add_argument("--arrivals", choices=("poisson", "gamma"), default="poisson")
    p.add_argument("--cv", type=float, default=2.0, help="gamma: gaps' coefficient of variation")
    p.add_argument("--prompt", type=lengths, default=lengths("lognormal:256:0.8"))
    p.add_argument("--output", type=lengths, default=lengths("lognormal:128:0.8"))
    p.add_argument("--vocab", type=int, default=151936, help="qwen2.5's vocabulary by default")
    p.add_argument("--max-slots", type=int, default=1024, help="prompt + output at most")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    count = max(1, round(args.rate * args.minutes * 60))
    arrivals = Arrivals(args.arrivals, args.rate, args.cv)
    requests = generate_requests(args.seed, count, arrivals, args.prompt, args.output,
                                 args.vocab, args.max_slots)  # fmt: skip
    kept = [r for r in requests if r.arrival_s <= args.minutes * 60] or requests[:1]
    write_requests(kept, args.out)
    print(f"{len(kept)} requests over {kept[-1].arrival_s:.0f} s written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
