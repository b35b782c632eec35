"""A Hugging Face checkpoint directory (config.json + safetensors) as a model source: its rung
graphs are built from the weights (graphs/decoder.py, the paged prefill from graphs/stateful.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.architecture import load_config
from compile_ahead.runtime.model.safetensors_store import SafetensorsStore, checkpoint_files
from compile_ahead.runtime.model.weights import check_weights
from compile_ahead.runtime.sources.base import ModelSource, ReopenSpec

if TYPE_CHECKING:
    import openvino as ov

    from compile_ahead.runtime.graphs.ir.paged_prefill import PagedPrefillStep
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.graphs.step import CompiledStep


@dataclass(frozen=True)
class CheckpointSource(ModelSource):
    def build_graph(self, spec: GraphSpec) -> ov.Model:
        from compile_ahead.runtime.graphs.decoder import build_step_model

        if spec.paged:
            from compile_ahead.runtime.graphs.ir.paged_prefill import paged_prefill_model
            from compile_ahead.runtime.graphs.stateful import build_stateful_model

            return paged_prefill_model(build_stateful_model(self.config, self.weights))
        return build_step_model(self.config, self.weights, spec)

    def make_step(
        self, compiled: ov.CompiledModel, spec: GraphSpec
    ) -> CompiledStep | PagedPrefillStep:
        if spec.paged:
            from compile_ahead.runtime.graphs.ir.paged_prefill import PagedPrefillStep

            return PagedPrefillStep(compiled, spec, self.config.num_layers)
        from compile_ahead.runtime.graphs.step import CompiledStep

        return CompiledStep(compiled, spec, self.config.num_layers)

    def reopen(self) -> ReopenSpec:
        assert self.model_dir is not None, "a checkpoint source has its directory"
        return ReopenSpec(str(self.model_dir))


def load_checkpoint(model_dir: Path, name: str | None = None) -> CheckpointSource:
    if not model_dir.is_dir():
        raise CompileAheadError(f"{model_dir}: not a model directory")
    config = load_config(model_dir)
    store = SafetensorsStore(checkpoint_files(model_dir))
    check_weights(store, config, str(model_dir))
    return CheckpointSource(name or str(model_dir), config, store, False, str(model_dir), model_dir)
