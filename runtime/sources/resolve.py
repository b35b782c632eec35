"""Resolve ``--model NAME`` to a model source: a directory (an optimum-intel export, a Hugging
Face checkpoint, or one holding a single GGUF file), an ``.xml`` IR, a ``.gguf`` file, a hub id
in the local cache, or a preset (the real checkpoint when cached locally, else seeded synthetic
weights; a GGUF preset is its installed file or refused). Never downloads."""

from __future__ import annotations

from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.ir_files import is_ir_path, refuse_onnx
from compile_ahead.runtime.model.presets import PRESETS, SYNTHETIC_SEED
from compile_ahead.runtime.sources.base import ModelSource, ReopenSpec
from compile_ahead.runtime.sources.checkpoint import load_checkpoint


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
    preset_name: str, seed: int = SYNTHETIC_SEED, dtype: str | None = None
) -> ModelSource:
    """Seeded synthetic weights of a preset in ``dtype`` (default: the published checkpoint's),
    written once as a checkpoint in the user cache and memory-mapped like a real one; labelled
    synthetic (see synthetic_checkpoint)."""
    from compile_ahead.runtime.sources.synthetic import synthetic_source

    return synthetic_source(PRESETS[preset_name].name, seed, dtype)


def resolve_model(
    name: str, allow_synthetic: bool = True, synthetic_dtype: str | None = None
) -> ModelSource:
    """Directory path (optimum-intel export or HF checkpoint), ``.xml`` IR, hub id in the local
    cache, or preset name (see PRESETS). ``synthetic_dtype`` chooses the dtype of a preset's
    synthetic weights; a model with real weights is refused with it (it would do nothing)."""
    source = _resolve(name, allow_synthetic, synthetic_dtype)
    if synthetic_dtype is not None and not source.synthetic:
        raise CompileAheadError(
            f"--synthetic-dtype {synthetic_dtype}: {source.name} has real weights "
            f"({source.origin}); the flag sets the dtype of a preset's synthetic weights"
        )
    held = source.describe().get("weight_format")
    if synthetic_dtype is not None and held != synthetic_dtype:  # a checkpoint directory's
        raise CompileAheadError(
            f"--synthetic-dtype {synthetic_dtype}: {name} holds synthetic {held} weights"
        )
    return source


def reopen(spec: ReopenSpec) -> ModelSource:
    """The model another process's source holds, as its ``reopen()`` said to open it."""
    return resolve_model(spec.target, synthetic_dtype=spec.synthetic_dtype)


def _resolve(name: str, allow_synthetic: bool, synthetic_dtype: str | None) -> ModelSource:
    path = Path(name).expanduser()
    refuse_onnx(path)
    if path.exists():
        if is_ir_path(path):
            from compile_ahead.runtime.sources.ir_source import load_ir

            return load_ir(path, name)
        from compile_ahead.runtime.sources.gguf_source import SUFFIX, gguf_in, load_gguf

        if path.is_file():
            if path.suffix.lower() == SUFFIX:
                return load_gguf(path, name)
            raise CompileAheadError(
                f"{path}: is a file; pass an OpenVINO IR (.xml), a GGUF file (.gguf), an "
                "optimum-intel export or Hugging Face checkpoint directory, or a preset name"
            )
        from compile_ahead.runtime.sources.synthetic import load_synthetic_checkpoint

        synthetic = load_synthetic_checkpoint(path, name)
        if synthetic is not None:
            return synthetic
        gguf = gguf_in(path)
        return load_checkpoint(path, name) if gguf is None else load_gguf(gguf, name)
    preset = PRESETS.get(name.lower())
    if preset is not None and preset.gguf_package is not None:
        from compile_ahead.runtime.sources.gguf_source import load_gguf
        from compile_ahead.runtime.sources.packaged_gguf import packaged_gguf

        package = preset.gguf_package
        return load_gguf(packaged_gguf(package), preset.name, package.described)
    if preset is not None:
        for repo_id in preset.hub_ids:
            cached = find_in_hf_cache(repo_id)
            if cached is not None:
                return load_checkpoint(cached, f"{preset.name} ({repo_id})")
        if not allow_synthetic:
            raise CompileAheadError(f"preset {preset.name}: no real checkpoint in the local cache")
        return synthetic_model(preset.name, dtype=synthetic_dtype)
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
