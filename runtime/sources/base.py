"""What every model source is: a config, weights, a label that says whether the weights are
real, and the answers the compile layer asks of it (how a rung graph is made, how a compiled one
is driven, what identifies its weights, how another process opens the same model). A new kind
of source subclasses ModelSource (as sources/checkpoint.py and sources/ir_source.py do) and is
resolved in sources/resolve.py; nothing in the compile or ladder layers changes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from compile_ahead.runtime.model.architecture import ModelConfig
from compile_ahead.runtime.model.weights import WeightStore

if TYPE_CHECKING:
    import openvino as ov

    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.sources.tokenizer import TextTokenizer


@dataclass(frozen=True)
class ReopenSpec:
    """How another process (a compile worker) opens the model a source holds
    (sources/resolve.py's ``reopen``): ``target`` as resolve_model takes it (a checkpoint
    directory, a synthetic checkpoint's directory, an IR file, a preset), with the dtype of a
    preset whose weights are drawn in memory. Small and picklable: it goes to the worker in
    each request."""

    target: str
    synthetic_dtype: str | None = None


@dataclass(frozen=True)
class ModelSource(ABC):
    name: str  # what the user asked for
    config: ModelConfig
    weights: WeightStore
    synthetic: bool
    origin: str  # checkpoint path, or how the synthetic weights were made
    model_dir: Path | None = None  # where a tokenizer may live

    # Whether rung graphs are built from the weights by graphs/decoder.py (so the baselines
    # built from weights work too) or cut from a graph the user brought (an IR).
    built_from_weights: ClassVar[bool] = True

    @property
    def label(self) -> str:
        """One line for every output: which model, and whether its weights are real."""
        kind = (
            "SYNTHETIC weights (seeded random, not a trained model)"
            if self.synthetic
            else "real weights"
        )
        return f"{self.name} [{kind}; {self.origin}]"

    def describe(self) -> dict:
        return {"model": self.name, "synthetic": self.synthetic, "origin": self.origin}

    @abstractmethod
    def build_graph(self, spec: GraphSpec) -> ov.Model:
        """The uncompiled step graph of one rung (decode or prefill chunk)."""

    @abstractmethod
    def make_step(self, compiled: ov.CompiledModel, spec: GraphSpec) -> Any:
        """The step that drives a compiled rung graph of this source (graphs/step.py's
        interface: bind a KV arena, run a chunk)."""

    @abstractmethod
    def reopen(self) -> ReopenSpec:
        """How a compile worker opens this same model (weights_identity then tells whether it
        found the same weights)."""

    def text_tokenizer(self) -> TextTokenizer:
        """The model's own tokenizer (text prompts, decoded output), or one line saying why
        there is none."""
        from compile_ahead.runtime.sources.tokenizer import load_tokenizer

        return load_tokenizer(self.model_dir, self.name)

    def has_tokenizer(self) -> bool:
        """Whether the model has its own tokenizer (text_tokenizer may still refuse a broken
        one): a tokenizer beside a checkpoint or an export."""
        from compile_ahead.runtime.sources.tokenizer import has_tokenizer_files

        return has_tokenizer_files(self.model_dir)

    def chat_template(self) -> tuple[str, dict[str, str]] | None:
        """The model's chat template and the special tokens it names (bos_token,
        eos_token), or None when it has none: a checkpoint's tokenizer_config.json."""
        from compile_ahead.runtime.sources.tokenizer import checkpoint_chat_template

        return checkpoint_chat_template(self.model_dir)

    def check_split(self) -> None:
        """Refuse, in one line, a model whose split graphs (--graph split) cannot be made;
        graphs built from weights always can."""
        return None

    def weights_identity(self) -> dict[str, Any] | None:
        """What the weight values are, as taken when they were opened (the compile cache's
        key); None when they cannot be named (nothing is cached then)."""
        return self.weights.identity()

    def weights_unsettled(self) -> str | None:
        """Why the weights may no longer be what ``weights_identity`` names (changed on disk
        since they were opened, or written just before); None when they are what it says. The
        compile cache neither imports nor stores a graph of these weights then."""
        return self.weights.unsettled()
