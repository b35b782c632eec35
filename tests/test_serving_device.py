"""The serving engine on compiled [B, C] graphs: every request's tokens equal its own batch-1
greedy run, whatever joins, leaves or switches bucket around it (transformers at the f32 hint
for the tiny checkpoints; the runtime's one-rung greedy for the tiny preset), through the
replay and through the api.Engine its HTTP endpoint uses."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from compile_ahead.runtime.serving.api import ServingSettings, TokenEvent, start_engine
from compile_ahead.runtime.serving.device_executor import device_engine
from compile_ahead.runtime.serving.engine import replay
from compile_ahead.runtime.serving.requests import Request
from compile_ahead.runtime.serving.workloads import read_requests
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import generate_on, reference_greedy

SHORT = Path(__file__).parent / "fixtures" / "serving" / "short.jsonl"
GRID = ((1, 2, 4), (16, 32, 48))
# (tokens generated in all before it joins, prompt, max new tokens): joins and leaves around
# moves up in batch (B joins A), up the ladder (A crosses 16 with B live, then 32), to four
# rows (C, D), and down again (A and E leave; C and D fit two rows).
JOINS = [
    (0, list(range(1, 11)), 30),
    (3, [7, 8, 9], 6),
    (10, list(range(40, 60)), 20),
    (12, [3, 4], 40),
    (20, [11, 12, 13, 14, 15], 4),
]


def requests_of(joins):
    return [Request(f"r{i}", tuple(p), n, 0.0) for i, (_, p, n) in enumerate(joins)]


def serve_joins(source, options, policy, kv, prefill_chunk=None):
    """Serve JOINS, each request submitted once the engine has generated its count of tokens
    (not on a clock: the same joins whatever the machine's speed)."""
    extra = {"options": options, "kv": kv}
    if prefill_chunk is not None:
        extra["prefill_chunk"] = prefill_chunk
    settings = ServingSettings(*GRID, policy, None, extra)
    engine = device_engine(source, settings)
    pending = list(zip([j[0] for j in JOINS], requests_of(JOINS), strict=True))
    try:
        engine.start()
        while pending or engine.busy:
            made = sum(len(x.tokens) for x in engine.lives.values())
            while pending and pending[0][0] <= made:
                engine.submit(pending.pop(0)[1])
            if not engine.iterate():
                engine.executor.wait(engine.clock.now() + 0.01)
    finally:
        engine.executor.close()
    return engine, requests_of(JOINS)


def serve_file(source, options, policy, kv):
    settings = ServingSettings(*GRID, policy, None, {"options": options, "kv": kv})
    engine = device_engine(source, settings)
    requests = read_requests(SHORT, source.config.vocab_size)
    try:
        replay(engine, requests)
    finally:
        engine.executor.close()
    return engine, requests


def assert_switched_with_live_rows(engine):
    moves = [(s["from"], s["to"]) for s in engine.stats.switches if s["from"] and s["rows"]]
    assert any(b[0] > a[0] for a, b in moves), moves  # batch up, rows live
    assert any(b[1] > a[1] for a, b in moves), moves  # capacity up, rows live
    assert any(b[0] < a[0] for a, b in moves), moves  # batch down, rows live


# The default prefill chunk takes each prompt in one call; 7 takes the longer ones in several,
# the last padded.
@pytest.mark.parametrize(("kv", "chunk"), [("reserve", 7), ("copy", None)])
def test_tiny_preset_tokens_equal_each_requests_own_batch_1_greedy_run(f32_cached, kv, chunk):
    source = resolve_model("tiny")
    engine, requests = serve_joins(source, f32_cached, "up-front", kv, chunk)
    assert_switched_with_live_rows(engine)
    if chunk is not None:
        assert all(s.spec.chunk == chunk for s in engine.executor.prefills.values())
    for r in requests:
        alone = generate_on(source, 48, list(r.prompt), r.max_new_tokens, options=f32_cached)
        assert engine.lives[r.request_id].tokens == alone.tokens, r.request_id


@pytest.mark.parametrize("checkpoint", ["tiny_qwen2_dir", "tiny_llama_dir"])
def test_checkpoint_tokens_equal_transformers_greedy(request, f32_cached, checkpoint):
    model_dir = request.getfixturevalue(checkpoint)
    source = resolve_model(str(model_dir))
    engine, requests = serve_joins(source, f32_cached, "up-front", "copy")
    assert_switched_with_live_rows(engine)
    for r in requests:
        expected, _ = reference_greedy(model_dir, list(r.prompt), r.max_new_tokens)
        assert engine.lives[r.request_id].tokens == expected, r.request_id


@pytest.mark.parametrize("policy", ["ahead", "on-demand"])
def test_a_replayed_file_gives_each_request_its_own_greedy_tokens(f32_cached, policy):
    source = resolve_model("tiny")
    engine, requests = serve_file(source, f32_cached, policy, "reserve")
    assert engine.stats.switches
    for r in requests:
        alone = generate_on(source, 48, list(r.prompt), r.max_new_tokens, options=f32_cached)
        assert engine.lives[r.request_id].tokens == alone.tokens, r.request_id


def test_the_engine_interface_streams_cancels_refuses_and_drains(f32_cached):
    source = resolve_model("tiny")
    settings = ServingSettings(*GRID, "ahead", None, {"options": f32_cached})
    engine = start_engine(source, settings)
    assert engine.max_context == GRID[1][-1] and engine.eos_token_id is None
    events: dict[str, list[TokenEvent]] = {}
    ended = {name: threading.Event() for name in ("a", "b", "long", "gone")}

    def collect(event: TokenEvent) -> None:
        events.setdefault(event.request_id, []).append(event)
        if event.finished is not None:
            ended[event.request_id].set()

    prompts = {"a": [5, 6, 7], "b": [9, 8, 7, 6, 5, 4, 3, 2, 1, 9, 8, 7, 6, 5, 4, 3, 2]}
    engine.submit("a", prompts["a"], 20, collect)
    engine.submit("b", prompts["b"], 25, collect)
    engine.submit("long", [1] * 40, 9, collect)  # 49 slots: beyond the top capacity
    engine.submit("gone", [3, 3], 30, collect)
    engine.cancel("gone")
    for done in ended.values():
        assert done.wait(120)
    for name in ("a", "b"):
        tokens = [e.token for e in events[name] if e.token is not None]
        alone = generate_on(source, 48, prompts[name], len(tokens), options=f32_cached)
        assert tokens == alone.tokens and events[name][-1].finished == "length"
    assert [e.finished for e in events["long"]] == ["refused"]
    assert "exceed the top capacity (48)" in (events["long"][0].message or "")
    assert events["gone"][-1].finished == "cancelled"
    status = engine.status()
    assert status["ready"] and status["policy"] == "ahead" and status["queued"] == 0
    metrics = engine.metrics()
    assert metrics["requests_metrics"]["requests"]["finished"] >= 2
    engine.drain(10.0)
    late: list[TokenEvent] = []
    engine.submit("late", [1, 2], 2, late.append)
    assert [e.finished for e in late] == ["refused"]


def test_an_ir_serves_each_request_its_own_batch_1_greedy_tokens(ir_exports):
    from ir_batch_reference import EXACT_F32

    source = resolve_model(str(ir_exports[("qwen2", "fp16")]))
    engine, requests = serve_joins(source, EXACT_F32, "up-front", "reserve")
    assert_switched_with_live_rows(engine)
    for r in requests:
        alone = generate_on(source, 48, list(r.prompt), r.max_new_tokens, options=EXACT_F32)
        assert engine.lives[r.request_id].tokens == alone.tokens, r.request_id


def test_the_serve_command_reports_each_requests_own_greedy_tokens(tmp_path, f32_cached):
    import json

    from cli import run_cli

    out = tmp_path / "report.json"
    done = run_cli(
        "serve", "--model", "tiny", "--requests", SHORT, "--ladder", "16,32,48",
        "--buckets", "1,2,4", "--inference-precision", "f32", "--no-cache", "--out", out,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "requests: 10 finished, 0 refused of 10" in done.stdout
    report = json.loads(out.read_text())
    assert report["engine"]["clock"] == "wall" and report["engine"]["peak_rss_bytes"] > 0
    source = resolve_model("tiny")
    asked = {r.request_id: r for r in read_requests(SHORT, source.config.vocab_size)}
    for record in report["requests"]:
        r = asked[record["id"]]
        alone = generate_on(source, 48, list(r.prompt), r.max_new_tokens, options=f32_cached)
        assert record["tokens"] == alone.tokens, record["id"]
