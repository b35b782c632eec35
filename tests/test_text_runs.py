"""Text in and out of `run`: a greedy run's report holds each sequence's generated ids and their
text (B = 1 included), and `run --text FILE` teacher-forces a document and scores it, its
negative log-likelihood equal to transformers' at f32 on the same token ids.

The model: a tiny random Qwen2 with a byte-level BPE tokenizer trained on the project's LICENSE
(so the document encodes to real merges, 2,723 tokens) and a 4,096-token context, so that a
run over the whole LICENSE crosses two boundaries.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli import run_cli

from compile_ahead.commands.main import main
from conftest import one_line_error, random_qwen2_checkpoint, reference_greedy, transformers_nll

LICENSE = Path(__file__).resolve().parents[1] / "LICENSE"
LADDER = "512,1024,2816"  # the LICENSE's tokens cross 512 and 1024; 2816 holds them all
PROMPT_LEN = 64
F32 = ("--inference-precision", "f32")


@pytest.fixture(scope="module")
def text_model(tmp_path_factory) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    path = random_qwen2_checkpoint(
        tmp_path_factory.mktemp("tiny-with-bpe"), seed=3, max_position_embeddings=4096
    )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=1000, initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator([LICENSE.read_text()], trainer)
    tok.save(str(path / "tokenizer.json"))
    return path


def _tokenizer(model: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(model / "tokenizer.json"))


def _run(tmp_path: Path, *argv) -> dict:
    report = tmp_path / "report.json"
    done = run_cli("run", *argv, *F32, "--no-cache", "--no-progress", "--report", report)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(report.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["i2", "i3"])
def test_text_nll_equals_transformers_across_two_boundaries(text_model, tmp_path, schedule):
    report = _run(
        tmp_path,
        *("--model", text_model, "--text", LICENSE, "--ladder", LADDER),
        *("--prompt-len", PROMPT_LEN, "--schedule", schedule),
    )
    ids = _tokenizer(text_model).encode(LICENSE.read_text()).ids
    ref = transformers_nll(text_model, ids, PROMPT_LEN)
    score = report["text_score"]
    assert [(b["from"], b["to"]) for b in report["boundaries"]] == [(512, 1024), (1024, 2816)]
    assert score["tokens_scored"] == len(ref) == len(ids) - PROMPT_LEN >= 2000
    assert abs(score["nll_per_token"] - ref.mean()) < 1e-3
    assert score["perplexity"] == pytest.approx(np.exp(score["nll_per_token"]))
    # Each rung's share: the tokens whose logits its graph gave (the prompt's last: the first).
    per_rung = {r["capacity"]: r for r in score["rungs"]}
    ends = {512: 512 - PROMPT_LEN + 1, 1024: 1024 - PROMPT_LEN + 1, 2816: len(ref)}
    start = 0
    for capacity, end in ends.items():
        assert per_rung[capacity]["tokens_scored"] == end - start
        assert abs(per_rung[capacity]["nll_per_token"] - ref[start:end].mean()) < 1e-3
        start = end


@pytest.mark.slow
def test_text_with_decode_tokens_forces_only_that_many(text_model, tmp_path):
    report = _run(
        tmp_path,
        *("--model", text_model, "--text", LICENSE, "--ladder", "64,128"),
        *("--prompt-len", 16, "--decode-tokens", 100, "--schedule", "i1"),
    )
    ids = _tokenizer(text_model).encode(LICENSE.read_text()).ids[:117]
    ref = transformers_nll(text_model, ids, 16)
    assert report["text_score"]["tokens_scored"] == 101 == len(ref)
    assert abs(report["text_score"]["nll_per_token"] - ref.mean()) < 1e-3
    assert report["context_final"] == 116
    assert "sequences" not in report  # teacher-forced at B = 1: the report it always was


@pytest.mark.slow
def test_a_greedy_report_holds_tokens_and_text_at_b1_and_in_a_batch(text_model, tmp_path):
    tok = _tokenizer(text_model)
    prompt = "Licensed under the Apache License"
    ids = tok.encode(prompt).ids
    want = reference_greedy(text_model, ids, 6)[0]
    common = ("--model", text_model, "--ladder", "32,64", "--max-new-tokens", 6, "--schedule")
    one = _run(tmp_path, *common, "i2", "--prompt", prompt)
    assert one["sequences"] == [
        {
            "sequence": 0,
            "prompt_len": len(ids),
            "tokens_generated": 6,
            "tokens": want,
            "stop_reason": "token limit",
            "first_token_s": one["sequences"][0]["first_token_s"],
            "text": tok.decode(want),
        }
    ]
    batch = _run(tmp_path, *common, "i1", "--prompt", prompt, "--batch", 2)
    assert [s["tokens"] for s in batch["sequences"]] == [want, want]
    assert [s["text"] for s in batch["sequences"]] == [tok.decode(want)] * 2


def test_without_a_tokenizer_a_greedy_report_holds_the_ids_only(tiny_qwen2_dir, tmp_path):
    prompt = [5, 17, 99]
    report = _run(
        tmp_path,
        *("--model", tiny_qwen2_dir, "--ladder", "16,32", "--schedule", "b0"),
        *("--prompt-ids", "5,17,99", "--max-new-tokens", 4),
    )
    (seq,) = report["sequences"]
    assert seq["tokens"] == reference_greedy(tiny_qwen2_dir, prompt, 4)[0]
    assert "text" not in seq


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--prompt", "hi"), "--text forces a file's tokens, its first --prompt-len the prompt: "),
        (("--max-new-tokens", "4"), "not with --max-new-tokens"),
        (("--prompt-len", "8,16"), "one --prompt-len for every sequence"),
        (("--ladder", "64,128"), "longer than the top rung (128) holds"),
        (("--ladder", "64,4096", "--decode-tokens", "4000"), "--decode-tokens 4000: "),
    ],
)
def test_text_refusals_are_one_line(text_model, argv, message, capsys):
    assert main(["run", "--model", str(text_model), "--text", str(LICENSE), *argv]) == 2
    err = capsys.readouterr().err
    assert message in one_line_error(err)


def test_text_needs_a_tokenizer_and_some_text(tiny_qwen2_dir, text_model, tmp_path, capsys):
    blank = tmp_path / "blank.txt"
    blank.write_text(" \n\n")
    cases = [
        (tiny_qwen2_dir, LICENSE, "needs the model's tokenizer"),
        (text_model, blank, f"--text {blank}: empty (no text to force)"),
        (text_model, tmp_path, f"--text {tmp_path}: not a regular file"),
    ]
    for model, text, message in cases:
        argv = ["run", "--model", str(model), "--text", str(text), "--ladder", "16,32"]
        assert main(argv) == 2
        assert message in one_line_error(capsys.readouterr().err)


def test_kept_window_logits_are_the_models_at_every_ladder_boundary(tiny_qwen2_dir, f32_cached):
    """keep_window_logits: b0 (one top rung) records the windows of every rung of the ladder,
    and their logits are transformers' at the same positions."""
    import torch
    from transformers import AutoModelForCausalLM

    from compile_ahead.runtime.ladder.runner import run_ladder
    from compile_ahead.runtime.ladder.settings.capacities import Ladder
    from compile_ahead.runtime.ladder.settings.config import RunConfig
    from compile_ahead.runtime.ladder.settings.run_protocol import teacher_forced
    from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
    from compile_ahead.runtime.sources.resolve import resolve_model

    protocol = teacher_forced(1000, 8, 50)
    config = RunConfig(
        SCHEDULES["b0"],
        Ladder((16, 32, 64)),
        protocol,
        options=f32_cached,
        keep_window_logits=True,
    )
    result = run_ladder(resolve_model(str(tiny_qwen2_dir)), config)
    entries = result.report.boundary_tokens
    assert sorted({e["context"] for e in entries}) == [
        13,
        14,
        15,
        16,
        17,
        18,
        29,
        30,
        31,
        32,
        33,
        34,
    ]
    ids = [*protocol.prompt, *protocol.forced]
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].numpy()
    assert len(result.window_logits) == len(entries)
    for entry, logits in zip(entries, result.window_logits, strict=True):
        # The step at `context` filled slots fed the token at position `context`.
        np.testing.assert_allclose(logits, ref[entry["context"]], atol=1e-4)
        assert entry["top1"] == int(np.argmax(ref[entry["context"]]))


@pytest.mark.slow
def test_smollm2_text_nll_equals_transformers_from_the_same_gguf(tmp_path, smollm2_transformers):
    """The trained model: SmolLM2-135M-Instruct's GGUF (Q4_1, compressed in the graphs) forcing
    the LICENSE's first 1,024 tokens across 256 -> 512 -> 1024 at f32, against transformers'
    f32 dequantization of the same file, on the same ids (the GGUF's tokenizer, its BOS
    first)."""
    from compile_ahead.runtime.sources.resolve import resolve_model

    ids = list(resolve_model("smollm2-135m").text_tokenizer().encode(LICENSE.read_text()).ids)
    steps = 1024 - PROMPT_LEN  # the top rung's slots
    report = _run(
        tmp_path,
        *("--model", "smollm2-135m", "--text", LICENSE, "--ladder", "256,512,1024"),
        *("--prompt-len", PROMPT_LEN, "--decode-tokens", steps),
    )
    ref = transformers_nll(smollm2_transformers, ids[: PROMPT_LEN + steps + 1], PROMPT_LEN)
    score = report["text_score"]
    assert [(b["from"], b["to"]) for b in report["boundaries"]] == [(256, 512), (512, 1024)]
    assert score["tokens_scored"] == len(ref) == steps + 1
    assert abs(score["nll_per_token"] - ref.mean()) < 1e-3
