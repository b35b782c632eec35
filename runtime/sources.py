"""Resolve ``--model NAME`` to a config and a weight store: a directory, a cached hub id, or a
preset (real checkpoint when cached locally, else seeded synthetic weights). Never downloads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from compile_ahead.errors import CompileAheadError

from .config import ModelConfig, load_config
from .ir_files import is_ir_path, refuse_onnx
from .presets import PRESETS
from .weights import SafetensorsStore, WeightStore, check_weights, checkpoint_files

if TYPE_CHECKING:
    import openvino as ov

    from .graphs import GraphSpec

SYNTHETIC_SEED = 0


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

    # Whether rung graphs are built from the weights by graphs.py (so split graphs and the
    # baselines built from weights work too) or cut from a graph the user brought (an IR).
    built_from_weights: ClassVar[bool] = True

    def build_graph(self, spec: GraphSpec) -> ov.Model:
        """The uncompiled step graph of one rung (decode or prefill chunk)."""
        from .graphs import build_step_model

        return build_step_model(self.config, self.weights, spec)


def load_checkpoint(model_dir: Path, name: str | None = None) -> ModelSource:
    if not model_dir.is_dir():
        raise CompileAheadError(f"{model_dir}: not a model directory")
    config = load_config(model_dir)
    store = SafetensorsStore(checkpoint_files(model_dir))
    check_weights(store, config, str(model_dir))
    return ModelSource(name or str(model_dir), config, store, False, str(model_dir), model_dir)


def find_in_hf_cache(repo_id: str) -> Path | None:
    """The snapshot directory of a hub repo if the local cache holds its config and weights."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        path = Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    if (path / "config.json").exists() and any(path.glob("*.safetensors")):
        return path
    return None


def synthetic_model(
    preset_name: str, seed: int = SYNTHETIC_SEED, dtype: str = "f16"
) -> ModelSource:
    """Seeded synthetic weights of a preset, written once as a checkpoint in the user cache
    and memory-mapped like a real one; labelled synthetic (see synthetic_checkpoint)."""
    from .synthetic_checkpoint import synthetic_source  # imports this module

    return synthetic_source(PRESETS[preset_name].name, seed, dtype)


def resolve_model(name: str, allow_synthetic: bool = True) -> ModelSource:
    """Directory path (optimum-intel export or HF checkpoint), ``.xml`` IR, hub id in the local
    cache, or preset name (see PRESETS)."""
    path = Path(name).expanduser()
    refuse_onnx(path)
    if path.exists():
        if is_ir_path(path):
            from .ir_model import load_ir  # imports this module

            return load_ir(path, name)
        if path.is_file():
            raise CompileAheadError(
                f"{path}: is a file; pass an OpenVINO IR (.xml), an optimum-intel export or "
                "Hugging Face checkpoint directory, or a preset name"
            )
        return load_checkpoint(path, name)
    preset = PRESETS.get(name.lower())
    if preset is not None:
        for repo_id in preset.hub_ids:
            cached = find_in_hf_cache(repo_id)
            if cached is not None:
                return load_checkpoint(cached, f"{preset.name} ({repo_id})")
        if not allow_synthetic:
            raise CompileAheadError(f"preset {preset.name}: no real checkpoint in the local cache")
        return synthetic_model(preset.name)
    if "/" in name and not name.startswith((".", "/")):
        cached = find_in_hf_cache(name)
        if cached is not None:
            return load_checkpoint(cached, name)
        raise CompileAheadError(
            f"{name}: not found in the local Hugging Face cache (nothing is downloaded); "
            "pass a checkpoint directory or a preset"
        )
    raise CompileAheadError(
        f"{name}: no such directory, cached hub id or preset; presets: {', '.join(PRESETS)}"
    )
