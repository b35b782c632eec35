"""Decoder model configuration: what the graphs need to know, validated from config.json."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from compile_ahead.errors import CompileAheadError

# HF architecture name -> our family. Both are pre-norm RMSNorm decoders with RoPE, GQA and a
# SwiGLU MLP; Qwen2 adds biases on the q/k/v projections.
SUPPORTED_ARCHITECTURES = {"Qwen2ForCausalLM": "qwen2", "LlamaForCausalLM": "llama"}

# RoPE variants whose frequencies we compute; anything else is refused rather than ignored.
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class RopeConfig:
    theta: float = 10000.0
    rope_type: str = "default"
    factor: float = 1.0
    # llama3 only
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class ModelConfig:
    architecture: str  # "qwen2" | "llama"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope: RopeConfig
    tie_word_embeddings: bool
    attention_bias: bool
    max_position_embeddings: int
    eos_token_ids: tuple[int, ...] = ()

    @property
    def group_size(self) -> int:
        """Query heads per KV head."""
        return self.num_heads // self.num_kv_heads

    def validate(self) -> ModelConfig:
        positive = {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
        }
        for key, value in positive.items():
            if not isinstance(value, int) or value <= 0:
                raise CompileAheadError(f"config: {key} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise CompileAheadError(
                f"config: num_attention_heads ({self.num_heads}) is not a multiple of "
                f"num_key_value_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise CompileAheadError(f"config: head_dim ({self.head_dim}) must be even for RoPE")
        if not self.rms_norm_eps > 0:
            raise CompileAheadError(f"config: rms_norm_eps must be > 0, got {self.rms_norm_eps}")
        if not self.rope.theta > 0:
            raise CompileAheadError(f"config: rope_theta must be > 0, got {self.rope.theta}")
        if self.rope.rope_type not in SUPPORTED_ROPE_TYPES:
            raise CompileAheadError(
                f"config: rope scaling type {self.rope.rope_type!r} is not implemented by the "
                f"graphs (supported: {', '.join(SUPPORTED_ROPE_TYPES)})"
            )
        if self.rope.rope_type != "default" and not self.rope.factor > 0:
            raise CompileAheadError(
                f"config: rope scaling factor must be > 0, got {self.rope.factor}"
            )
        return self


# Fields that change the RoPE frequencies; two sources must agree on every one they both set.
_ROPE_SCALING_FIELDS = (
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
)


def _rope_type(params: dict[str, Any]) -> str:
    return str(params.get("rope_type", params.get("type", "default")))


def _rope_sources(cfg: dict[str, Any], source: str) -> dict[str, dict[str, Any]]:
    """The RoPE dicts a config carries, by key, each refused if it asks for what we lack.

    transformers 5 writes "rope_parameters" (theta inside); 4.x writes rope_theta +
    "rope_scaling". A config may carry both: neither may be ignored.
    """
    found: dict[str, dict[str, Any]] = {}
    for key in ("rope_scaling", "rope_parameters"):
        value = cfg.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise CompileAheadError(f"{source}: {key} must be an object, got {value!r}")
        rope_type = _rope_type(value)
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise CompileAheadError(
                f"{source}: {key}: rope scaling type {rope_type!r} is not implemented by the "
                f"graphs (supported: {', '.join(SUPPORTED_ROPE_TYPES)})"
            )
        found[key] = value
    if len(found) == 2:
        legacy, params = found["rope_scaling"], found["rope_parameters"]
        differ = [
            name
            for name in _ROPE_SCALING_FIELDS
            if name in legacy and name in params and legacy[name] != params[name]
        ]
        if _rope_type(legacy) != _rope_type(params) or differ:
            what = ", ".join(differ) if differ else "rope type"
            raise CompileAheadError(
                f"{source}: rope_scaling ({_rope_type(legacy)}) and rope_parameters "
                f"({_rope_type(params)}) disagree on {what}; keep one of them"
            )
    return found


def _rope_from_hf(cfg: dict[str, Any], source: str) -> RopeConfig:
    found = _rope_sources(cfg, source)
    params = {**found.get("rope_scaling", {}), **found.get("rope_parameters", {})}
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    return RopeConfig(
        theta=float(theta),
        rope_type=_rope_type(params),
        factor=float(params.get("factor", 1.0)),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(params.get("original_max_position_embeddings", 8192)),
    )


def config_from_hf(cfg: dict[str, Any], source: str = "config.json") -> ModelConfig:
    """Build a validated ModelConfig from a Hugging Face config dict."""
    archs = cfg.get("architectures") or []
    family = next((SUPPORTED_ARCHITECTURES[a] for a in archs if a in SUPPORTED_ARCHITECTURES), None)
    if family is None:
        raise CompileAheadError(
            f"{source}: unsupported architecture {archs or cfg.get('model_type')!r}; supported: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    if cfg.get("use_sliding_window"):
        raise CompileAheadError(f"{source}: sliding-window attention is not implemented")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise CompileAheadError(f"{source}: hidden_act {act!r} is not supported (only 'silu')")
    if cfg.get("mlp_bias"):
        raise CompileAheadError(f"{source}: mlp_bias=true is not supported")
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        head_dim = cfg.get("head_dim") or hidden // heads
        config = ModelConfig(
            architecture=family,
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(head_dim),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope=_rope_from_hf(cfg, source),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=family == "qwen2" or bool(cfg.get("attention_bias", False)),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 32768)),
            eos_token_ids=token_ids(cfg.get("eos_token_id"), f"{source}: eos_token_id"),
        )
    except KeyError as missing:
        raise CompileAheadError(f"{source}: required key {missing} is missing") from None
    except (TypeError, ValueError) as bad:
        raise CompileAheadError(f"{source}: malformed value ({bad})") from None
    return config.validate()


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; anything else is refused with one line."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CompileAheadError(f"{path}: cannot read ({err})") from None
    if not isinstance(raw, dict):
        raise CompileAheadError(f"{path}: not a JSON object")
    return raw


def token_ids(value: Any, where: str) -> tuple[int, ...]:
    """A token id field (one id, a list of ids or null) as a tuple of ids."""
    items = value if isinstance(value, list) else ([] if value is None else [value])
    if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in items):
        raise CompileAheadError(f"{where}: token ids must be non-negative integers, got {value!r}")
    return tuple(items)


def eos_token_ids(model_dir: Path, config: dict[str, Any], config_source: str) -> tuple[int, ...]:
    """The ids that end greedy generation, chosen as transformers (and LLMPipeline) choose them:
    a model directory's generation_config.json decides when it exists (instruct checkpoints
    list extra end-of-turn ids there; one naming none means no EOS, as transformers reads it);
    only without that file does config.json's eos_token_id count."""
    gen_path = model_dir / "generation_config.json"
    if gen_path.is_file():
        gen = read_json_object(gen_path)
        return token_ids(gen.get("eos_token_id"), f"{gen_path}: eos_token_id")
    return token_ids(config.get("eos_token_id"), f"{config_source}: eos_token_id")


def load_config(model_dir: Path) -> ModelConfig:
    """A checkpoint directory's model configuration, EOS ids as eos_token_ids chooses them."""
    path = model_dir / "config.json"
    if not path.exists():
        raise CompileAheadError(f"{path}: no config.json in the model directory")
    raw = read_json_object(path)
    config = config_from_hf(raw, str(path))
    return replace(config, eos_token_ids=eos_token_ids(model_dir, raw, str(path)))
