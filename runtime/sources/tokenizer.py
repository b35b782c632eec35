"""Text <-> token ids through the model's own tokenizer (never fetched): an optimum-intel
export's openvino-tokenizers IRs, or a tokenizer.json."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.ir_files import TOKENIZER_XML


class Encoded(Protocol):
    @property
    def ids(self) -> Sequence[int]: ...


class TextTokenizer(Protocol):
    """A tokenizers.Tokenizer or an OpenVINOTokenizer: all the commands use of one."""

    def encode(self, text: str) -> Encoded: ...

    def decode(self, ids: list[int]) -> str: ...


def load_tokenizer(model_dir: Path | None, model_name: str) -> TextTokenizer:
    """The export's openvino-tokenizers IRs when present, else tokenizer.json; both give
    ``encode(text).ids`` and ``decode(ids)``."""
    from tokenizers import Tokenizer

    if model_dir is not None and (model_dir / TOKENIZER_XML).is_file():
        from compile_ahead.runtime.sources.ov_tokenizer import OpenVINOTokenizer

        return OpenVINOTokenizer(model_dir)
    path = model_dir / "tokenizer.json" if model_dir is not None else None
    if path is None or not path.exists():
        raise CompileAheadError(
            f"{model_name}: text prompts need {TOKENIZER_XML} or tokenizer.json in the model "
            "directory (neither here); pass token ids with --prompt-ids instead"
        )
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises its own Exception subclass
        raise CompileAheadError(f"{path}: cannot load tokenizer ({err})") from None


def has_tokenizer_files(model_dir: Path | None) -> bool:
    """Whether ``model_dir`` holds a tokenizer load_tokenizer reads."""
    if model_dir is None:
        return False
    return any((model_dir / name).is_file() for name in (TOKENIZER_XML, "tokenizer.json"))


def checkpoint_chat_template(model_dir: Path | None) -> tuple[str, dict[str, str]] | None:
    """tokenizer_config.json's chat_template (a string) and its bos/eos tokens, or None."""
    import json

    path = model_dir / "tokenizer_config.json" if model_dir is not None else None
    if path is None or not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CompileAheadError(f"{path}: cannot read it ({err})") from None
    template = config.get("chat_template") if isinstance(config, dict) else None
    if not isinstance(template, str):
        return None
    special = {
        key: value
        for key in ("bos_token", "eos_token")
        if isinstance(value := config.get(key), str)
    }
    return template, special


def parse_token_ids(text: str, vocab_size: int | None, origin: str | None = None) -> list[int]:
    """--prompt-ids' comma-separated ids, checked against the vocabulary (None: only their
    spelling, before the model is known); ``origin`` names where they were given (a
    --prompts line), --prompt-ids by default."""
    what = origin or "--prompt-ids"
    try:
        ids = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise CompileAheadError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not ids:
        raise CompileAheadError(f"{what} is empty")
    if vocab_size is not None:
        check_token_ids(ids, vocab_size, what)
    return ids


def encode_prompt(
    tokenizer: TextTokenizer,
    text: str,
    vocab_size: int,
    model_name: str,
    origin: str | None = None,
) -> list[int]:
    """--prompt through the model's tokenizer (load_tokenizer), refused like --prompt-ids when
    it encodes to nothing or to ids the model has no embedding for (another model's);
    ``origin`` names where the text was given (a --prompts line), --prompt by default."""
    what = origin or "--prompt"
    ids = [int(i) for i in tokenizer.encode(text).ids]
    if not ids:
        raise CompileAheadError(f"{what}: the prompt encodes to no tokens")
    check_token_ids(ids, vocab_size, f"{what} (the tokenizer of {model_name})")
    return ids


def check_token_ids(ids: list[int], vocab_size: int, what: str) -> None:
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise CompileAheadError(
            f"{what}: token ids out of the vocabulary [0, {vocab_size}): {bad[:5]}"
        )
