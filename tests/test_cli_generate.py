"""`compile-ahead generate` end to end: JSON output, labels, and clear errors."""

from __future__ import annotations

import json

import pytest

from compile_ahead.commands.main import main
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
    assert out["sequences"][0]["tokens"] == reference_greedy(tiny_qwen2_dir, prompt, 6)[0]


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
    assert out["sequences"][0]["tokens"] == reference_greedy(tiny_qwen2_dir, [5, 17, 99], 4)[0]
    assert out["sequences"][0]["text"].split() == [f"w{t}" for t in out["sequences"][0]["tokens"]]


def _transformers_generate(model_dir, prompt: list[int], steps: int) -> list[int]:
    """transformers' own greedy generate with the EOS ids it reads from the directory."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), max_new_tokens=steps, do_sample=False, pad_token_id=0
        )
    return out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("generation_config", ["extra-eos", "no-eos", "absent"])
def test_generate_stops_at_eos_where_transformers_stops(
    generation_config, tiny_qwen2_dir, tmp_path, capsys
):
    """generation_config.json decides EOS when present (an instruct checkpoint lists end-of-turn
    ids there that config.json lacks); config.json's counts only without that file."""
    import shutil

    prompt, steps = [5, 17, 99, 3, 250], 12
    free = reference_greedy(tiny_qwen2_dir, prompt, steps)[0]
    # generation_config.json's EOS comes first in the free run, config.json's after it.
    early = free[0]
    late = next((t for t in free if t != early), None)
    assert late is not None, f"the tiny model generates one token only: {free}"
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_qwen2_dir, model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "eos_token_id": late}))
    gen_path = model_dir / "generation_config.json"
    gen = {"bos_token_id": config.get("bos_token_id")}
    if generation_config == "extra-eos":
        gen_path.write_text(json.dumps({**gen, "eos_token_id": [999, early]}))
    elif generation_config == "no-eos":
        gen_path.write_text(json.dumps(gen))
    else:
        gen_path.unlink()
    expected = _transformers_generate(model_dir, prompt, steps)
    ids = ",".join(map(str, prompt))
    argv = ["generate", "--model", str(model_dir), "--prompt-ids", ids, "--stop-at-eos"]
    argv += ["--max-new-tokens", str(steps), "--inference-precision", "f32", "--json"]
    assert main([*argv, "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["sequences"][0]["tokens"] == expected
