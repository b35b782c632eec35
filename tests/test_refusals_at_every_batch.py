"""Every refusal of a run at B = 1 is a refusal at B = 2, in the same words: one run path
for any B, so no check can be skipped by asking for a batch. Each case goes through the
command in-process (`run`, `generate`, `profile-compile --schedule`), once as given and once
with `--batch 2`; only a sequence's own prompt may be named in a batch's message."""

from __future__ import annotations

import pytest

from compile_ahead.commands.main import main
from compile_ahead.commands.profile_compile import main as profile_main
from conftest import one_line_error

RUN = ["run", "--model", "tiny", "--ladder", "16,32,64", "--no-progress"]
GENERATE = ["generate", "--model", "tiny", "--prompt-ids", "1,2,3"]
WORKER_FAULT_16 = ["--inject-worker-fault", "16:raise"]
WORKER_FAULT_32 = ["--inject-worker-fault", "32:raise"]

REFUSALS = [
    # flags alone, before any model is opened
    ([*RUN, "--prompt-len", "200"], "--prompt-len 200 must be in 1..63"),
    ([*RUN, "--boundary-window", "-1"], "--boundary-window must be >= 0"),
    ([*RUN, "--decode-tokens", "0"], "--decode-tokens must be positive"),
    ([*RUN, "--inject-worker-fault", "32:raise"], "needs --compile-placement worker"),
    ([*RUN, "--inject-compile-failure", "48"], "48: not a rung of the ladder"),
    ([*RUN, "--compile-timeout", "0"], "--compile-timeout must be a positive number"),
    ([*RUN, "--prompt-ids", "1,x"], "--prompt-ids must be comma-separated integers"),
    ([*RUN, "--prefill-chunk", "1", "--prefill-shape", "paged"], "--prefill-shape paged"),
    ([*RUN, "--prefill-chunk", "0"], "--prefill-chunk must be positive"),
    ([*RUN, "--ladder", "auto", "--max-context", "100"], "a multiple of 16"),
    ([*RUN, "--ladder", "16,8"], "ladder rung 8 is not a multiple of 16"),
    ([*RUN, "--prompt-len", "8", "--prompt-ids", "1,2"], "give the prompts one way"),
    ([*RUN, "--prompt", "hi", "--prompt-ids", "1,2"], "give the prompts one way"),
    ([*RUN, "--max-new-tokens", "4"], "--max-new-tokens counts generated tokens"),
    ([*RUN, "--max-new-tokens", "1", "--prompt-ids", "1,2"], "--max-new-tokens must be >= 2"),
    (
        [*RUN, "--schedule", "i1", "--compile-placement", "worker", *WORKER_FAULT_32],
        "schedule i1 compiles every rung in the foreground",
    ),
    # against the model
    (
        [*RUN, "--schedule", "i2", "--compile-placement", "worker", *WORKER_FAULT_16],
        "--inject-worker-fault 16: the worker compiles only the rungs after the first",
    ),
    ([*RUN, "--prompt-ids", ",".join(["7"] * 70)], "(70 tokens) does not fit the top rung (64)"),
    ([*RUN, "--prompt-ids", "1,99999"], "token ids out of the vocabulary"),
    ([*RUN, "--prompt", "hello"], "text prompts need openvino_tokenizer.xml or tokenizer.json"),
    ([*RUN, "--ladder", "16,32,65536"], "exceeds the model's max_position_embeddings"),
    ([*RUN, "--prefill-chunk", "64"], "--prefill-chunk 64 exceeds the first rung (16)"),
    ([*GENERATE, "--max-new-tokens", "0"], "--max-new-tokens must be positive"),
    ([*GENERATE, "--max-new-tokens", "40000"], "exceeds the model's max_position_embeddings"),
]


def _line(argv: list[str], capsys) -> str:
    assert main(argv) == 2, capsys.readouterr()
    return one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize(("argv", "says"), REFUSALS, ids=[" ".join(a[5:]) for a, _ in REFUSALS])
def test_a_refusal_at_batch_1_is_the_same_refusal_at_batch_2(tmp_path, capsys, argv, says):
    report = tmp_path / "r.json"
    extra = ["--report", str(report)] if argv[0] == "run" else []
    alone = _line([*argv, *extra], capsys)
    batch = _line([*argv, *extra, "--batch", "2"], capsys)
    assert says in alone, alone
    assert batch == alone.replace("the prompt (", "the prompt of sequence 0 ("), batch
    assert not report.exists()


def test_profile_compile_overlay_refuses_alike_at_every_batch(tmp_path, capsys):
    out = tmp_path / "prof"
    argv = ["--model", "tiny", "--ladder", "16,32", "--schedule", "i2", "--out", str(out)]
    argv += ["--prompt-len", "40"]
    assert profile_main(argv) == 2
    alone = one_line_error(capsys.readouterr().err, "profile-compile")
    assert profile_main([*argv, "--batch", "2"]) == 2
    assert one_line_error(capsys.readouterr().err, "profile-compile") == alone
    assert "--prompt-len 40 must be in 1..31" in alone
    assert not out.exists()
