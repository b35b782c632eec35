"""Tiny random decoders exported by optimum-intel's real exporter (optimum-cli), FP16, INT8 and
INT4, for the IR tests. Run as a script to (re)make them outside pytest:

    python tests/ir_fixtures.py OUT_DIR

Needs the ``test`` extra (optimum-intel, nncf, openvino-tokenizers, torch, transformers<5.6).
Each architecture gets a small byte-level BPE tokenizer so the export also carries
openvino_tokenizer.xml / openvino_detokenizer.xml.
"""

from __future__ import annotations

import contextlib
import io
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


def export(checkpoint: Path, out: Path, fmt: str, symmetric: bool) -> Path:
    """optimum-cli export openvino, run in this process (one import for every export)."""
    from optimum.commands.optimum_cli import main

    args = ["optimum-cli", "export", "openvino", "--model", str(checkpoint)]
    args += ["--task", "text-generation-with-past", *FORMATS[fmt]]
    if fmt == "int4" and symmetric:
        args.append("--sym")
    saved = sys.argv
    sys.argv = [*args, str(out)]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            main()
    finally:
        sys.argv = saved
    return out


def check_torchvision() -> None:
    """transformers imports torchvision when installed; a wheel built for another torch fails
    there and takes the export down with it."""
    try:
        import torchvision  # noqa: F401
    except ImportError:
        return
    except RuntimeError as err:
        raise RuntimeError(
            f"torchvision does not import ({err}); uninstall it (pip uninstall torchvision): "
            "the export does not need it"
        ) from None


def make_all(root: Path) -> dict[tuple[str, str], Path]:
    """Every (architecture, format) export under root; existing exports are reused."""
    check_torchvision()
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


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for key, path in make_all(Path(sys.argv[1])).items():
        print(*key, path)
