"""What every model source is: a config, weights, a label that says whether the weights are
real, and the answers the compile layer asks of it (how a rung graph is made, how a compiled one
is driven, what identifies its weights). A new kind of source subclasses ModelSource here and
is resolved in sources/resolve.py; nothing in the compile or ladder layers changes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from compile_ahead.runtime.model.architecture import ModelConfig
from compile_ahead.runtime.model.weights import WeightStore

if TYPE_CHECKING:
    import openvino as ov

    from compile_ahead.runtime.graphs.decoder import GraphSpec
    from compile_ahead.runtime.graphs.step import CompiledStep


@dataclass(frozen=True)
class ModelSource:
    name: str  # what the user asked for
    config: ModelConfig
    weights: WeightStore
    synthetic: bool
    origin: str  # checkpoint path, or how the synthetic weights were made
    model_dir: Path | None = None  # where a tokenizer may live

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

    # Whether rung graphs are built from the weights by graphs/decoder.py (so split graphs and
    # the baselines built from weights work too) or cut from a graph the user brought (an IR).
    built_from_weights: ClassVar[bool] = True

    def build_graph(self, spec: GraphSpec) -> ov.Model:
        """The uncompiled step graph of one rung (decode or prefill chunk)."""
        from compile_ahead.runtime.graphs.decoder import build_step_model

        if spec.paged:
            from compile_ahead.runtime.graphs.paged_prefill import paged_prefill_model
            from compile_ahead.runtime.graphs.stateful import build_stateful_model

            return paged_prefill_model(build_stateful_model(self.config, self.weights))
        return build_step_model(self.config, self.weights, spec)

    def make_step(self, compiled: ov.CompiledModel, spec: GraphSpec) -> CompiledStep:
        """The step that drives a compiled rung graph of this source."""
        from compile_ahead.runtime.graphs.step import CompiledStep

        if spec.paged:
            from compile_ahead.runtime.graphs.paged_prefill import PagedPrefillStep

            step: CompiledStep | PagedPrefillStep = PagedPrefillStep(
                compiled, spec, self.config.num_layers
            )
        else:
            step = CompiledStep(compiled, spec, self.config.num_layers)
        return step

    def weights_identity(self) -> dict[str, Any] | None:
        """What the weight values are, as taken when they were opened (the compile cache's
        key); None when they cannot be named (nothing is cached then)."""
        return self.weights.identity()

    def weights_unsettled(self) -> str | None:
        """Why the weights may no longer be what ``weights_identity`` names (changed on disk
        since they were opened, or written just before); None when they are what it says. The
        compile cache neither imports nor stores a graph of these weights then."""
        return self.weights.unsettled()
