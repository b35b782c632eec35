"""Request workloads: a JSONL request file anyone can write, and a seeded generator.

A request file has one JSON object per line (blank lines skipped):
``{"arrival_s": 0.5, "prompt_ids": [1, 2, 3], "max_new_tokens": 16}``, or ``"prompt": "text"``
instead of ``prompt_ids`` (tokenized with the model's tokenizer), and optionally ``"id"``.
It is read as the project reads every input file (a regular file, under a size cap), and a
malformed line is refused with its number.

The generator draws arrivals from a Poisson process at a rate (exponential gaps) or a gamma
process (gaps with a stated coefficient of variation: above 1 is bursty), and prompt and output
lengths from stated distributions, all from one seed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.input_files import read_input_text
from compile_ahead.runtime.serving.requests import Request

MAX_REQUEST_FILE_BYTES = 64 * 2**20
MAX_REQUESTS = 1_000_000
KEYS = {"id", "arrival_s", "prompt_ids", "prompt", "max_new_tokens"}

Tokenize = Callable[[str], list[int]]


def read_requests(
    path: str | Path,
    vocab_size: int,
    tokenize: Tokenize | None = None,
    what: str = "--requests",
) -> list[Request]:
    """The requests of a JSONL request file, in arrival order (ties in file order)."""
    text = read_input_text(path, f"{what} {path}", MAX_REQUEST_FILE_BYTES)
    found: list[Request] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{what} {path} line {number}"
        request = _parse_line(line, where, len(found), vocab_size, tokenize)
        if request.request_id in seen:
            raise CompileAheadError(f"{where}: id {request.request_id!r} appears twice")
        seen.add(request.request_id)
        found.append(request)
        if len(found) > MAX_REQUESTS:
            raise CompileAheadError(f"{where}: more than {MAX_REQUESTS} requests")
    if not found:
        raise CompileAheadError(f"{what} {path}: no requests")
    return sorted(found, key=lambda r: r.arrival_s)


def _parse_line(
    line: str, where: str, index: int, vocab_size: int, tokenize: Tokenize | None
) -> Request:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise CompileAheadError(f"{where}: not JSON ({err.msg})") from None
    if not isinstance(obj, dict):
        raise CompileAheadError(f"{where}: a request is a JSON object")
    unknown = sorted(set(obj) - KEYS)
    if unknown:
        raise CompileAheadError(f"{where}: unknown key {unknown[0]!r} (known: {sorted(KEYS)})")
    arrival = obj.get("arrival_s", 0.0)
    if not _number(arrival) or arrival < 0:
        raise CompileAheadError(f"{where}: arrival_s must be a number >= 0")
    new = obj.get("max_new_tokens")
    if not isinstance(new, int) or isinstance(new, bool) or new < 1:
        raise CompileAheadError(f"{where}: max_new_tokens must be an integer >= 1")
    prompt = _prompt(obj, where, vocab_size, tokenize)
    rid = obj.get("id", f"req-{index}")
    if not isinstance(rid, str | int) or isinstance(rid, bool) or not str(rid):
        raise CompileAheadError(f"{where}: id must be a non-empty string or an integer")
    return Request(str(rid), tuple(prompt), new, float(arrival))


def _number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _prompt(obj: dict, where: str, vocab_size: int, tokenize: Tokenize | None) -> list[int]:
    if ("prompt_ids" in obj) == ("prompt" in obj):
        raise CompileAheadError(f"{where}: give exactly one of prompt_ids and prompt")
    if "prompt" in obj:
        text = obj["prompt"]
        if not isinstance(text, str) or not text:
            raise CompileAheadError(f"{where}: prompt must be non-empty text")
        if tokenize is None:
            raise CompileAheadError(
                f"{where}: a text prompt needs the model's tokenizer, and this model has none; "
                "give prompt_ids"
            )
        ids = tokenize(text)
    else:
        ids = obj["prompt_ids"]
        if not isinstance(ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in ids
        ):
            raise CompileAheadError(f"{where}: prompt_ids must be a list of integers")
    if not ids:
        raise CompileAheadError(f"{where}: the prompt is empty")
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise CompileAheadError(
            f"{where}: token id {bad} outside the vocabulary (0..{vocab_size - 1})"
        )
    return list(ids)


@dataclass(frozen=True)
class Lengths:
    """A length distribution: ``fixed`` (a), ``uniform`` (a..b inclusive) or ``lognormal``
    (median a, shape sigma b), rounded and clipped to [1, cap]."""

    kind: str
    a: float
    b: float = 0.0
    cap: int = 1 << 20

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            x = np.full(n, self.a)
        elif self.kind == "uniform":
            x = rng.integers(int(self.a), int(self.b) + 1, n)
        elif self.kind == "lognormal":
            x = rng.lognormal(math.log(self.a), self.b, n)
        else:
            raise CompileAheadError(f"unknown length distribution {self.kind!r}")
        return np.clip(np.rint(x), 1, self.cap).astype(np.int64)

    def to_json(self) -> dict:
        return {"kind": self.kind, "a": self.a, "b": self.b, "cap": self.cap}


@dataclass(frozen=True)
class Arrivals:
    """Arrivals at ``rate`` per second: ``poisson``, or ``gamma`` gaps whose coefficient of
    variation is ``cv`` (cv 1 is Poisson; above 1 bursty)."""

    kind: str = "poisson"
    rate: float = 1.0
    cv: float = 1.0

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.rate <= 0:
            raise CompileAheadError("the arrival rate must be positive")
        if self.kind == "poisson":
            return rng.exponential(1.0 / self.rate, n)
        if self.kind == "gamma":
            shape = 1.0 / (self.cv * self.cv)
            return rng.gamma(shape, 1.0 / (self.rate * shape), n)
        raise CompileAheadError(f"unknown arrival process {self.kind!r}")

    def to_json(self) -> dict:
        return {"kind": self.kind, "rate": self.rate, "cv": self.cv}


def generate_requests(
    seed: int,
    count: int,
    arrivals: Arrivals,
    prompt: Lengths,
    output: Lengths,
    vocab_size: int,
    max_slots: int | None = None,
) -> list[Request]:
    """``count`` requests from ``seed``: arrival gaps, then prompt and output lengths, then
    prompt ids uniform over the vocabulary. With ``max_slots`` a request's output is cut so
    that prompt + output fits (the prompt first to at most max_slots - 1)."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(arrivals.gaps(rng, count))
    prompts = prompt.draw(rng, count)
    outputs = output.draw(rng, count)
    found = []
    for i in range(count):
        p, o = int(prompts[i]), int(outputs[i])
        if max_slots is not None:
            p = min(p, max_slots - 1)
            o = max(1, min(o, max_slots - p))
        ids = tuple(int(t) for t in rng.integers(0, vocab_size, p))
        found.append(Request(f"gen-{i}", ids, o, float(times[i])))
    return found


def requests_jsonl(requests: Sequence[Request]) -> str:
    """A request file's text that read_requests reads back as ``requests``."""
    lines = [
        json.dumps(
            {
                "id": r.request_id,
                "arrival_s": round(r.arrival_s, 6),
                "prompt_ids": list(r.prompt),
                "max_new_tokens": r.max_new_tokens,
            }
        )
        for r in requests
    ]
    return "\n".join(lines) + "\n"


def write_requests(requests: Sequence[Request], path: Path) -> None:
    """A request file that read_requests reads back as ``requests``."""
    path.write_text(requests_jsonl(requests))
