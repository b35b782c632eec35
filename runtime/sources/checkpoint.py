"""A Hugging Face checkpoint directory (config.json + safetensors) as a model source."""

from __future__ import annotations

from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.architecture import load_config
from compile_ahead.runtime.model.weights import SafetensorsStore, check_weights, checkpoint_files
from compile_ahead.runtime.sources.base import ModelSource


def load_checkpoint(model_dir: Path, name: str | None = None) -> ModelSource:
    if not model_dir.is_dir():
        raise CompileAheadError(f"{model_dir}: not a model directory")
    config = load_config(model_dir)
    store = SafetensorsStore(checkpoint_files(model_dir))
    check_weights(store, config, str(model_dir))
    return ModelSource(name or str(model_dir), config, store, False, str(model_dir), model_dir)
