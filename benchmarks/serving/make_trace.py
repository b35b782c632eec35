"""A seeded request file for the serving benchmarks (`compile-ahead serve --requests FILE`):
Poisson or gamma arrivals at a rate for a number of minutes, prompt and output lengths uniform
or lognormal, prompt ids uniform over the vocabulary. The same seed writes the same file.

With ``--text FILE --model M`` the prompts are real text instead: each request's prompt is a
run of whole words from the document, starting at a seeded word, as many as fit its drawn
prompt length in M's tokens (so prompt + output stays within --max-slots for M). The file then
holds ``prompt`` text, which `serve` tokenizes with the model's own tokenizer.

    python benchmarks/serving/make_trace.py --out trace.jsonl [--minutes 10] [--rate 0.5]
        [--arrivals poisson|gamma] [--cv 2] [--prompt lognormal:256:0.8]
        [--output lognormal:128:0.8] [--vocab 151936] [--max-slots 1024] [--seed 0]
        [--text DOCUMENT --model MODEL]

The shipped benchmark trace, benchmarks/serving/traces/smollm2-poisson-10min.jsonl, is:

    python benchmarks/serving/make_trace.py --text LICENSE --model smollm2-135m \
        --vocab 49152 --out benchmarks/serving/traces/smollm2-poisson-10min.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from compile_ahead.runtime.serving.requests import Request
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


def text_prompt(words: Sequence[str], start: int, tokens: int, count: Callable[[str], int]) -> str:
    """The longest run of whole words from ``start`` (wrapping around) that ``count`` puts at
    most ``tokens`` tokens long (at least one word)."""
    ring = list(words[start:]) + list(words[:start])
    lo, hi = 1, min(len(ring), tokens)  # a word is at least one token
    while lo < hi:  # the longest prefix that fits, by bisection
        mid = (lo + hi + 1) // 2
        if count(" ".join(ring[:mid])) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(ring[:lo])


def write_text_requests(
    requests: Sequence[Request], document: Path, model: str, seed: int, path: Path
) -> None:
    """``requests`` with real-text prompts cut from ``document`` (module docstring)."""
    from compile_ahead.commands.serve import prompt_tokenizer
    from compile_ahead.runtime.sources.resolve import resolve_model

    tokenize = prompt_tokenizer(resolve_model(model))
    if tokenize is None:
        raise SystemExit(f"--model {model}: it has no tokenizer for --text")
    words = document.read_text().split()
    rng = random.Random(seed)
    lines = []

    def count(text: str) -> int:
        return len(tokenize(text))

    for r in requests:
        text = text_prompt(words, rng.randrange(len(words)), len(r.prompt), count)
        record = {"id": r.request_id, "arrival_s": round(r.arrival_s, 6), "prompt": text}
        lines.append(json.dumps(record | {"max_new_tokens": r.max_new_tokens}))
    path.write_text("\n".join(lines) + "\n")


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
    p.add_argument("--text", type=Path, default=None, help="real-text prompts from this document")
    p.add_argument("--model", default=None, help="with --text: whose tokenizer counts tokens")
    args = p.parse_args(argv)
    if (args.text is None) != (args.model is None):
        p.error("--text and --model go together")
    count = max(1, round(args.rate * args.minutes * 60))
    arrivals = Arrivals(args.arrivals, args.rate, args.cv)
    requests = generate_requests(args.seed, count, arrivals, args.prompt, args.output,
                                 args.vocab, args.max_slots)  # fmt: skip
    kept = [r for r in requests if r.arrival_s <= args.minutes * 60] or requests[:1]
    if args.text is None:
        write_requests(kept, args.out)
    else:
        write_text_requests(kept, args.text, args.model, args.seed, args.out)
    print(f"{len(kept)} requests over {kept[-1].arrival_s:.0f} s written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
