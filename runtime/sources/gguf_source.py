"""A GGUF file as a model source: rung graphs built from its tensors by the same decoder as a
checkpoint's (graphs/decoder.py, split.py, the paged prefill from graphs/stateful.py), the
quantized weights kept compressed in the graphs (model/gguf_weights.py); its own tokenizer
and chat template."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.gguf_file import GGUFModel, read_gguf
from compile_ahead.runtime.model.gguf_weights import GGUFStore
from compile_ahead.runtime.model.weights import expected_shapes
from compile_ahead.runtime.sources.base import ReopenSpec
from compile_ahead.runtime.sources.checkpoint import CheckpointSource

if TYPE_CHECKING:
    from compile_ahead.runtime.sources.tokenizer import TextTokenizer

SUFFIX = ".gguf"


@dataclass(frozen=True)
class GGUFSource(CheckpointSource):
    gguf: GGUFModel | None = None

    def _model(self) -> GGUFModel:
        assert self.gguf is not None, "a GGUF source has its file"
        return self.gguf

    def describe(self) -> dict:
        kinds = Counter(t.kind for t in self._model().tensors.values())
        return {
            **super().describe(),
            "weight_format": "gguf " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())),
        }

    def reopen(self) -> ReopenSpec:
        return ReopenSpec(str(self._model().path))

    def text_tokenizer(self) -> TextTokenizer:
        from compile_ahead.runtime.sources.gguf_tokenizer import gguf_tokenizer

        tok = self._model().tokenizer
        if tok is None:
            raise CompileAheadError(
                f"{self.name}: the GGUF holds no tokenizer; pass token ids with --prompt-ids"
            )
        return gguf_tokenizer(tok, str(self._model().path))

    def has_tokenizer(self) -> bool:
        return self._model().tokenizer is not None

    def chat_template(self) -> tuple[str, dict[str, str]] | None:
        tok = self._model().tokenizer
        if tok is None or not tok.chat_template:
            return None
        special = {
            key: tok.tokens[i]
            for key, i in (("bos_token", tok.bos_id), ("eos_token", tok.eos_id))
            if i is not None and 0 <= i < len(tok.tokens)
        }
        return tok.chat_template, special


def gguf_in(directory: Path) -> Path | None:
    """The one .gguf file of ``directory`` when it holds no checkpoint (config.json); None
    when it holds none. Several are refused: which one is meant cannot be told."""
    if (directory / "config.json").exists():
        return None
    files = sorted(p for p in directory.glob(f"*{SUFFIX}") if p.is_file())
    if len(files) > 1:
        raise CompileAheadError(
            f"{directory}: holds {len(files)} GGUF files ({', '.join(p.name for p in files)}); "
            "pass one of them"
        )
    return files[0] if files else None


def load_gguf(path: Path, name: str | None = None, described: str | None = None) -> GGUFSource:
    """The GGUF file ``path`` as a source; ``described`` says what it is in its label (else
    the file's own name for the model)."""
    model = read_gguf(path)
    store = GGUFStore(model)
    check_shapes(store, model)
    what = described or f"GGUF {model.name or model.architecture}"
    return GGUFSource(
        name or str(path), model.config, store, False, f"{what}, {path}", None, gguf=model
    )


def check_shapes(store: GGUFStore, model: GGUFModel) -> None:
    """Every tensor the graphs read is there with the shape the configuration gives (a
    quantized tensor's shape, its values left compressed)."""
    present = set(store.names())
    for name, shape in expected_shapes(model.config).items():
        if name not in present:
            raise CompileAheadError(f"{model.path}: no tensor for {name!r}")
        if store.shape(name) != shape:
            raise CompileAheadError(
                f"{model.path}: tensor for {name!r} has shape {list(store.shape(name))}, "
                f"the configuration gives {list(shape)}"
            )
