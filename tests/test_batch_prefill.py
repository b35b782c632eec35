"""A batch's prompts prefilled as a batch-1 run's are: each sequence's prompt on the batch-1
prefill graph (paged on CPU; static when told), its K/V into its own row of the batch's store,
with no padding. Each sequence's greedy tokens equal its own batch-1 run and transformers', on
every schedule, with ragged prompts across boundaries, an EOS mid-run and a per-sequence token
limit; the report's prefill field, the trace's prefill slices and the compile cache's keys."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from batch_runs import batch1_tokens, eos_mid_run, run_batch
from cli import run_cli

from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.run_protocol import greedy
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import reference_greedy

LADDER = Ladder.parse("48,64,96,128")
# Ragged prompts of 5, 17 and 40 tokens: the longest (>= 32) takes the paged prefill graph by
# default, the first rung is 48, and sequence 2's 80 tokens take the batch past 64 and 96.
PROMPTS = [
    [5, 17, 301, 44, 9],
    list(range(5, 22)),
    [(7 * i) % 997 + 1 for i in range(40)],
]
DECODE_TOKENS = [30, 90, 80]  # sequence 0 stops at its own token limit
EOS_SEQUENCE = 1  # given an EOS it generates mid-run


@pytest.fixture(scope="module")
def ragged_case(tiny_qwen2_dir, f32_cached):
    """The protocols, each one's batch-1 tokens, and transformers' greedy tokens."""
    source = resolve_model(str(tiny_qwen2_dir))
    protocols = [greedy(p, n) for p, n in zip(PROMPTS, DECODE_TOKENS, strict=True)]
    free = batch1_tokens(source, protocols[EOS_SEQUENCE], LADDER, options=f32_cached)
    eos = eos_mid_run(free)
    protocols[EOS_SEQUENCE] = greedy(PROMPTS[EOS_SEQUENCE], DECODE_TOKENS[EOS_SEQUENCE], (eos,))
    alone = [batch1_tokens(source, p, LADDER, options=f32_cached) for p in protocols]
    reference = [
        reference_greedy(tiny_qwen2_dir, p, n + 1)
        for p, n in zip(PROMPTS, DECODE_TOKENS, strict=True)
    ]
    return source, protocols, alone, reference


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_each_sequence_prefilled_on_the_paged_graph_equals_batch1_and_transformers(
    ragged_case, schedule
):
    source, protocols, alone, reference = ragged_case
    result = run_batch(source, protocols, LADDER, schedule, keep_logits=True)
    got = [s["tokens"] for s in result.sequences]
    assert got == alone
    for tokens, logits, (ref, ref_logits) in zip(
        got, result.sequence_logits, reference, strict=True
    ):
        assert tokens == ref[: len(tokens)]
        # Every token's logits, the first one's from the prompt's prefill included.
        np.testing.assert_allclose(np.stack(logits), np.stack(ref_logits[: len(logits)]), atol=2e-4)
    stops = [s["stop_reason"] for s in result.sequences]
    assert stops == ["token limit", "eos", "token limit"]
    assert len(got[EOS_SEQUENCE]) < DECODE_TOKENS[EOS_SEQUENCE] + 1
    assert [len(t) for i, t in enumerate(got) if i != EOS_SEQUENCE] == [31, 81]
    report = result.report
    prefill = report.prefill
    assert prefill["path"] == "paged" and prefill["chunk"] == 48
    assert [s["prompt_len"] for s in prefill["sequences"]] == [5, 17, 40]
    assert all(s["prefill_s"] > 0 for s in prefill["sequences"])
    assert report.prefill_s == pytest.approx(sum(s["prefill_s"] for s in prefill["sequences"]))
    # No prompt step: the batch steps only decode, the first tokens came from the prompts.
    assert report.batch is not None and report.batch.batch_steps == max(len(t) for t in got) - 1
    if schedule != "b0":  # b0 runs on the top rung only
        crossed = [(b.from_rung, b.to) for b in report.boundaries]
        assert crossed == [(48, 64), (64, 96), (96, 128)], crossed
    prefill_jobs = [j for j in report.compile_jobs if j["chunk"] > 1]
    first = 128 if schedule == "b0" else 48  # the first rung the schedule uses
    assert [(j["capacity"], j["background"]) for j in prefill_jobs] == [(first, False)]
    if schedule in ("i2", "i3"):  # the next rung still compiles in the background
        rungs = [j for j in report.compile_jobs if j["chunk"] == 1]
        assert [(j["capacity"], j["background"]) for j in rungs] == [
            (48, False),
            (64, True),
            (96, True),
            (128, True),
        ]
    if schedule == "i3":  # pages committed for the rows written, not the reservation
        assert 0 < report.kv_committed_peak_bytes < report.kv_reserved_peak_bytes


def _run(*args: object) -> subprocess.CompletedProcess:
    return run_cli(
        *["run", "--model", "tiny", "--ladder", "48,64,96,128", "--inference-precision", "f32"],
        *["--no-progress", "--decode-tokens", "40"],
        *[a for p in PROMPTS for a in ("--prompt-ids", ",".join(map(str, p)))],
        *args,
        timeout=300,
    )


def test_static_chunked_prefill_at_batch_3_matches_token_by_token_and_batch1(tmp_path):
    """`run --prefill-shape static --prefill-chunk 16` at B=3 through the command: each
    sequence's tokens equal token by token through the batched decode graph
    (--prefill-chunk 1) and its own batch-1 run; the report says which path ran, and the
    trace has one prefill slice per sequence and no prompt steps."""
    static, by_token = tmp_path / "static.json", tmp_path / "token.json"
    trace = tmp_path / "static.pftrace"
    proc = _run(
        *["--schedule", "i3", "--prefill-shape", "static", "--prefill-chunk", "16"],
        *["--report", static, "--trace", trace],
    )
    assert proc.returncode == 0, proc.stderr
    proc = _run("--schedule", "i2", "--prefill-chunk", "1", "--report", by_token)
    assert proc.returncode == 0, proc.stderr
    chunked, stepped = json.loads(static.read_text()), json.loads(by_token.read_text())
    tokens = [s["tokens"] for s in chunked["sequences"]]
    assert tokens == [s["tokens"] for s in stepped["sequences"]]
    source = resolve_model("tiny")
    for prompt, got in zip(PROMPTS, tokens, strict=True):
        assert got == batch1_tokens(source, greedy(prompt, 40), LADDER)
    assert chunked["prefill"]["path"] == "static" and chunked["prefill"]["chunk"] == 16
    assert chunked["prefill"]["chosen_by"] == "flag"
    assert stepped["prefill"]["path"] == "decode-graph" and stepped["prefill"]["chunk"] == 1
    for report in (chunked, stepped):
        lengths = [s["prompt_len"] for s in report["prefill"]["sequences"]]
        assert lengths == [5, 17, 40] and report["prefill"]["prefill_s"] > 0
    # Token by token, the 5 calls while every sequence was in its prompt are the prefill.
    assert chunked["batch_steps"] == 40 and stepped["batch_steps"] == 40 + 40 - 5
    _check_trace(trace, [5, 17, 40], decode_steps=40)


def _check_trace(trace, prompt_lens: list[int], decode_steps: int) -> None:
    from trace_processor import NodeTraceProcessor, unavailable_reason

    from compile_ahead.profiling.perfetto.validate import validate_trace

    report = validate_trace(trace)
    assert report.ok, report.summary()
    if unavailable_reason() is not None:
        pytest.skip(str(unavailable_reason()))
    with NodeTraceProcessor.open(trace) as tp:
        assert tp.error_stats() == []
        names = [r["name"] for r in tp.rows("select name from slice order by ts")]
    assert [n for n in names if n.startswith("prefill ")] == [
        f"prefill {n} tokens" for n in prompt_lens
    ]
    assert sum(n.startswith("decode") for n in names) == decode_steps


def test_batch_prefill_graph_is_the_batch1_graph_in_the_cache(tmp_path):
    """The prefill graph a batch compiles takes one sequence: a batch-1 run with the same
    first rung stored it, so the batch imports it; the [B, C] decode rungs are its own. (The
    static graph: the paged one is never cached, the plugin cannot import it.)"""
    cache = tmp_path / "cache"
    common = ["--schedule", "i2", "--prefill-shape", "static", "--cache-dir", cache]
    alone = run_cli(
        *["run", "--model", "tiny", "--ladder", "48,64,96,128", "--inference-precision", "f32"],
        *["--no-progress", "--decode-tokens", "4", "--prompt-len", "40", *common],
        timeout=300,
    )
    assert alone.returncode == 0, alone.stderr
    report = tmp_path / "batch.json"
    proc = _run(*common, "--report", report)
    assert proc.returncode == 0, proc.stderr
    jobs = json.loads(report.read_text())["compile_jobs"]
    assert [(j["chunk"], j["cache"]) for j in jobs if j["chunk"] > 1] == [(48, "hit")]
    assert {j["cache"] for j in jobs if j["chunk"] == 1} == {"miss"}
