"""`compile-ahead generate` end to end: JSON output, labels, and clear errors."""

from __future__ import annotations

import json

import pytest

from compile_ahead.cli import main
from conftest import reference_greedy


def test_generate_json_matches_reference(tiny_qwen2_dir, capsys):
    prompt = [5, 17, 99, 3, 250]
    code = main(
        [
            "generate",
            "--model",
            str(tiny_qwen2_dir),
            "--prompt-ids",
            ",".join(map(str, prompt)),
            "--max-new-tokens",
            "6",
            "--inference-precision",
            "f32",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["synthetic"] is False
    assert out["model"] == str(tiny_qwen2_dir)
    assert out["tokens"] == reference_greedy(tiny_qwen2_dir, prompt, 6)[0]


def test_generate_labels_synthetic_preset(capsys):
    assert (
        main(["generate", "--model", "tiny", "--prompt-ids", "1,2,3", "--max-new-tokens", "3"]) == 0
    )
    assert "SYNTHETIC" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prompt-ids", "1,x"], "comma-separated integers"),
        (["--prompt-ids", "1,5000"], "out of the vocabulary"),
        (["--prompt-ids", "1", "--max-new-tokens", "0"], "--max-new-tokens must be positive"),
        (["--prompt", "hello"], "openvino_tokenizer.xml or tokenizer.json"),
    ],
)
def test_generate_bad_input(argv, message, capsys):
    assert main(["generate", "--model", "tiny", *argv]) == 2
    assert message in capsys.readouterr().err


def test_generate_text_prompt_needs_both_or_neither(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--model", "tiny", "--prompt", "a", "--prompt-ids", "1"])


def test_generate_from_text_with_the_checkpoint_tokenizer(tiny_qwen2_dir, tmp_path, capsys):
    import shutil

    from tokenizers import Tokenizer, models, pre_tokenizers

    model_dir = tmp_path / "with-tokenizer"
    shutil.copytree(tiny_qwen2_dir, model_dir)
    words = [f"w{i}" for i in range(1000)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(model_dir / "tokenizer.json"))
    code = main(
        [
            "generate",
            "--model",
            str(model_dir),
            "--prompt",
            "w5 w17 w99",
            "--max-new-tokens",
            "4",
            "--inference-precision",
            "f32",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"] == reference_greedy(tiny_qwen2_dir, [5, 17, 99], 4)[0]
    assert out["text"].split() == [f"w{t}" for t in out["tokens"]]
