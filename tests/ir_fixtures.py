"""Tiny random decoders exported by optimum-intel's real exporter (optimum-cli), FP16, INT8 and
INT4, for the IR tests; and Qwen2 exports at the head_dims real models use, FP16 and BF16.
Run as a script to (re)make them outside pytest:

    python tests/ir_fixtures.py OUT_DIR [--head-dims]

Needs the ``test`` extra (optimum-intel, nncf, openvino-tokenizers, torch, transformers<5.6).
Each architecture gets a small byte-level BPE tokenizer so the export also carries
openvino_tokenizer.xml / openvino_detokenizer.xml.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

# A weight init wider than transformers' default (0.02) keeps random logits far from ties, so
# greedy tokens compare exactly between implementations.
INIT_RANGE = 0.2
SHAPES = dict(
    vocab_size=512,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    initializer_range=INIT_RANGE,
)
ARCHITECTURES = ("qwen2", "llama", "phi3")
# name -> optimum-cli weight options; INT4 in groups of 32 (the hidden size is 128), every
# ratio-defining layer in INT4. Llama's INT4 is symmetric, the others asymmetric.
FORMATS = {
    "fp16": ["--weight-format", "fp16"],
    "int8": ["--weight-format", "int8"],
    "int4": ["--weight-format", "int4", "--group-size", "32", "--ratio", "1.0"],
}
SYMMETRIC_INT4 = {"llama"}
# The head_dims real models use (Qwen2.5-0.5B, TinyLlama, Llama-3.2-1B: 64; Llama-3-8B,
# Qwen2.5-7B: 128), each hidden 256 in this many query heads (half as many KV heads).
HEAD_DIM_HEADS = {64: 4, 128: 2}
# name -> (the checkpoint's torch dtype, optimum-cli weight options). Published checkpoints are
# mostly bf16 and exported with --weight-format fp16 (bf16-fp16). optimum-intel 2.2 offers no
# bf16 weight format: a bf16 checkpoint exported without one keeps its weights in bf16 (bf16).
DTYPE_FORMATS = {
    "fp16": ("float32", FORMATS["fp16"]),
    "bf16-fp16": ("bfloat16", FORMATS["fp16"]),
    "bf16": ("bfloat16", []),
}
CORPUS = [
    "compile ahead, not up front: the next capacity compiles while the device decodes.",
    "A static-shape device cannot grow a KV cache, so runtimes compile one graph per capacity.",
    "The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs.",
] * 20


def _config(arch: str):
    import transformers as tf

    if arch == "qwen2":
        return tf.Qwen2Config(**SHAPES, tie_word_embeddings=True)
    if arch == "llama":
        return tf.LlamaConfig(**SHAPES, tie_word_embeddings=False)
    if arch == "phi3":
        return tf.Phi3Config(**SHAPES, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    raise ValueError(arch)


def _model_class(arch: str):
    import transformers as tf

    return {
        "qwen2": tf.Qwen2ForCausalLM,
        "llama": tf.LlamaForCausalLM,
        "phi3": tf.Phi3ForCausalLM,
    }[arch]


def save_tokenizer(path: Path, vocab_size: int) -> None:
    """A byte-level BPE trained on a few sentences, saved as a fast HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(path)


def save_checkpoint(arch: str, path: Path, seed: int) -> Path:
    import torch

    torch.manual_seed(seed)
    config = _config(arch)
    model = _model_class(arch)(config).eval()
    model.save_pretrained(path)
    save_tokenizer(path, config.vocab_size)
    return path


def save_head_dim_checkpoint(path: Path, head_dim: int, dtype: str) -> Path:
    """A Qwen2 of hidden 256 at ``head_dim``, saved in ``dtype`` (a torch dtype's name)."""
    import torch
    import transformers as tf

    torch.manual_seed(head_dim)
    heads = HEAD_DIM_HEADS[head_dim]
    shapes = SHAPES | dict(hidden_size=256, num_attention_heads=heads)
    config = tf.Qwen2Config(**shapes | dict(num_key_value_heads=heads // 2))
    model = tf.Qwen2ForCausalLM(config).eval().to(getattr(torch, dtype))
    model.save_pretrained(path)
    return path


def export(checkpoint: Path, out: Path, fmt: str, symmetric: bool) -> Path:
    """optimum-cli export openvino of one of FORMATS, run in this process."""
    options = FORMATS[fmt] + (["--sym"] if fmt == "int4" and symmetric else [])
    return export_with(checkpoint, out, options)


def export_with(checkpoint: Path, out: Path, options: list[str]) -> Path:
    """optimum-cli export openvino with these weight options, run in this process (one import
    for every export)."""
    from optimum.commands.optimum_cli import main

    args = ["optimum-cli", "export", "openvino", "--model", str(checkpoint)]
    args += ["--task", "text-generation-with-past", *options]
    saved = sys.argv
    sys.argv = [*args, str(out)]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            main()
    finally:
        sys.argv = saved
    return out


# optimum-intel requires torchvision; pip's wheel may be built for another torch than the CPU
# one installed here and then fails to import ("torchvision::nms does not exist"), taking the
# export down with it although nothing exported needs it. An exporter process started with
# this on its path sees no torchvision at all (transformers and optimum then skip it).
# None in sys.modules: `import torchvision` fails and importlib.util.find_spec says absent.
HIDE_TORCHVISION = 'import sys\nsys.modules["torchvision"] = None\n'


MADE = "made: "  # how the script names each export on stdout


def torchvision_imports() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True)
    return probe.returncode == 0


def make_all_in_subprocess(root: Path, head_dims: bool = False) -> dict[tuple[str, str], Path]:
    """make_all (make_head_dims if ``head_dims``) in a fresh exporter process, with a
    torchvision that cannot import hidden."""
    env = dict(os.environ)
    if not torchvision_imports():
        hide = root / "_hide_torchvision"
        hide.mkdir(parents=True, exist_ok=True)
        (hide / "sitecustomize.py").write_text(HIDE_TORCHVISION)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hide), env.get("PYTHONPATH")]))
    argv = [sys.executable, __file__, str(root), *(["--head-dims"] if head_dims else [])]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"exporting the IR fixtures failed:\n{proc.stderr[-3000:]}")
    made = {}
    for line in proc.stdout.splitlines():  # the exporter may print its own lines too
        if line.startswith(MADE):
            arch, fmt, path = line.removeprefix(MADE).split(" ", 2)
            made[(arch, fmt)] = Path(path)
    return made


def make_all(root: Path) -> dict[tuple[str, str], Path]:
    """Every (architecture, format) export under root; existing exports are reused."""
    made = {}
    for seed, arch in enumerate(ARCHITECTURES):
        checkpoint = root / f"{arch}-hf"
        if not (checkpoint / "config.json").exists():
            save_checkpoint(arch, checkpoint, seed)
        for fmt in FORMATS:
            out = root / f"{arch}-{fmt}"
            if not (out / "openvino_model.xml").exists():
                export(checkpoint, out, fmt, arch in SYMMETRIC_INT4)
            made[(arch, fmt)] = out
    return made


def make_head_dims(root: Path) -> dict[tuple[str, str], Path]:
    """Every (qwen2-hd<head_dim>, DTYPE_FORMATS name) export under root; existing exports are
    reused."""
    made = {}
    for head_dim in HEAD_DIM_HEADS:
        for name, (dtype, options) in DTYPE_FORMATS.items():
            checkpoint = root / f"qwen2-hd{head_dim}-{dtype}-hf"
            if not (checkpoint / "config.json").exists():
                save_head_dim_checkpoint(checkpoint, head_dim, dtype)
            out = root / f"qwen2-hd{head_dim}-{name}"
            if not (out / "openvino_model.xml").exists():
                export_with(checkpoint, out, options)
            made[(f"qwen2-hd{head_dim}", name)] = out
    return made


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[2:] not in ([], ["--head-dims"]):
        sys.exit(__doc__)
    make = make_head_dims if sys.argv[2:] else make_all
    for (arch, fmt), path in make(Path(sys.argv[1])).items():
        print(f"{MADE}{arch} {fmt} {path}")
