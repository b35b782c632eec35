"""Random-weight qwen2.5-0.5b exports for benchmarks/ir_vs_genai.py: a transformers random init
saved with save_pretrained (bf16 safetensors), then `optimum-cli export openvino` per weight
format (optimum-intel's defaults for int8 and int4). Reused when already there.

    python benchmarks/ir_exports.py WORKDIR [--formats fp16,int8,int4]

Needs optimum-intel (the ``test`` extra); see pyproject.toml about torchvision.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

# Qwen2.5-0.5B's shapes (config.json of the hub checkpoint).
QWEN25_05B = dict(
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    eos_token_id=151643,
)
FORMATS = ("fp16", "int8", "int4")


def save_random_checkpoint(path: Path, seed: int = 0) -> Path:
    if (path / "config.json").exists():
        return path
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**QWEN25_05B)).to(torch.bfloat16).eval()
    model.save_pretrained(path)
    return path


def export(checkpoint: Path, out: Path, fmt: str) -> Path:
    if (out / "openvino_model.xml").exists():
        return out
    cmd = ["optimum-cli", "export", "openvino", "--model", str(checkpoint)]
    cmd += ["--task", "text-generation-with-past", "--weight-format", fmt, str(out)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def prepare(workdir: Path, formats: tuple[str, ...] = FORMATS) -> dict[str, Path]:
    checkpoint = save_random_checkpoint(workdir / "qwen2.5-0.5b-random-hf")
    return {fmt: export(checkpoint, workdir / f"qwen2.5-0.5b-random-{fmt}", fmt) for fmt in formats}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workdir", type=Path)
    p.add_argument("--formats", default=",".join(FORMATS))
    args = p.parse_args(argv)
    for fmt, path in prepare(args.workdir, tuple(args.formats.split(","))).items():
        print(fmt, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
