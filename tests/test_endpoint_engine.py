"""The endpoint on the real serving engine (runtime/serving's start_engine, compiled [B, C]
buckets at the f32 hint), called by 8 concurrent openai clients that join and leave, streamed
and not: each response's tokens equal the same prompt's greedy run alone (the runtime's
one-rung greedy for the tiny preset and an optimum-intel IR, transformers for a tiny Qwen2
checkpoint), cut at the model's EOS as the endpoint stops there."""

from __future__ import annotations

import random
import threading
import time

import pytest
from endpoint_server import MODEL, served

from compile_ahead.runtime.serving.api import ServingSettings, start_engine
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import generate_on, reference_greedy

pytestmark = pytest.mark.slow  # compiles a grid of buckets, then serves it

BATCHES = (1, 2, 4, 8)
CAPACITIES = (16, 32, 48)
CLIENTS = 8
ROUNDS = 3  # requests per client, one after another: clients join and leave all along


def _workload(vocab: int, seed: int = 0) -> list[list[tuple[list[int], int, bool]]]:
    """Per client, its requests: (prompt, max_tokens, stream), all fitting the top capacity
    and crossing capacities 16 and 32 for some."""
    rng = random.Random(seed)
    work = []
    for _ in range(CLIENTS):
        mine = []
        for _ in range(ROUNDS):
            prompt = [rng.randrange(1, vocab) for _ in range(rng.randrange(2, 20))]
            mine.append((prompt, rng.randrange(2, 48 - len(prompt)), rng.random() < 0.5))
        work.append(mine)
    return work


def _serve_clients(served_endpoint, work) -> dict[tuple[int, int], tuple[list[int], str]]:
    client = served_endpoint.client(timeout=300)
    got: dict[tuple[int, int], tuple[list[int], str]] = {}
    errors: list[BaseException] = []

    def one(c: int) -> None:
        try:
            for k, (prompt, n, stream) in enumerate(work[c]):
                if stream:
                    ids, reason = [], None
                    for chunk in client.completions.create(
                        model=MODEL, prompt=prompt, max_tokens=n, stream=True
                    ):
                        ids += chunk.choices[0].model_extra["token_ids"]
                        reason = chunk.choices[0].finish_reason or reason
                else:
                    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=n)
                    ids, reason = r.choices[0].model_extra["token_ids"], r.choices[0].finish_reason
                    assert r.usage.completion_tokens == len(ids)
                got[(c, k)] = (ids, reason)
        except BaseException as err:  # raised in the test's thread below
            errors.append(err)

    threads = [threading.Thread(target=one, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors[0]
    return got


def _cut_at_eos(tokens: list[int], eos: tuple[int, ...]) -> tuple[list[int], str]:
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1], "stop"
    return tokens, "length"


def _check(source, options, reference) -> None:
    settings = ServingSettings(
        BATCHES, CAPACITIES, "up-front", None, {"options": options, "stop_at_eos": True}
    )
    engine = start_engine(source, settings)
    deadline = time.monotonic() + 300
    while not engine.status()["ready"]:  # every bucket compiled: the clients then share rows
        assert time.monotonic() < deadline, "the engine never became ready"
        time.sleep(0.05)
    work = _workload(source.config.vocab_size)
    try:
        with served(engine, vocab_size=source.config.vocab_size) as s:
            got = _serve_clients(s, work)
            status, metrics = engine.status(), engine.metrics()
    finally:
        engine.drain(10)
    assert status["ready"] and status["running"] == 0 and status["queued"] == 0
    used = [tuple(b) for b in metrics["engine"]["buckets_used"]]
    assert max(b for b, _ in used) >= 4 and max(c for _, c in used) > 16, used  # shared rows
    eos = tuple(source.config.eos_token_ids)
    for c, mine in enumerate(work):
        for k, (prompt, n, _) in enumerate(mine):
            expected = _cut_at_eos(reference(prompt, n), eos)
            assert got[(c, k)] == expected, (c, k)


def test_tiny_preset_over_http_equals_each_prompts_greedy_run_alone(f32_cached):
    source = resolve_model("tiny")

    def alone(prompt, n):
        return generate_on(source, 48, prompt, n, options=f32_cached).tokens

    _check(source, f32_cached, alone)


def test_a_checkpoint_over_http_equals_transformers_greedy(tiny_qwen2_dir, f32_cached):
    _check(
        resolve_model(str(tiny_qwen2_dir)),
        f32_cached,
        lambda prompt, n: reference_greedy(tiny_qwen2_dir, prompt, n)[0],
    )


def test_an_ir_over_http_equals_each_prompts_greedy_run_alone(ir_exports):
    from ir_batch_reference import EXACT_F32

    source = resolve_model(str(ir_exports[("qwen2", "fp16")]))

    def alone(prompt, n):
        return generate_on(source, 48, prompt, n, options=EXACT_F32).tokens

    _check(source, EXACT_F32, alone)
