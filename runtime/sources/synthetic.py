"""Synthetic preset weights as a model source: the checkpoint written once in the user cache
(model/synthetic_checkpoint.py), memory-mapped like a real one and labelled synthetic."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TextIO

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.user_cache import cache_root
from compile_ahead.runtime.model.presets import PRESETS, SYNTHETIC_SEED
from compile_ahead.runtime.model.synthetic_checkpoint import (
    SyntheticCheckpointWarning,
    ensure_checkpoint,
    synthetic_identity,
)
from compile_ahead.runtime.model.synthetic_store import SyntheticStore
from compile_ahead.runtime.sources.base import ModelSource, ReopenSpec
from compile_ahead.runtime.sources.checkpoint import CheckpointSource, load_checkpoint


@dataclass(frozen=True)
class SyntheticSource(CheckpointSource):
    """A checkpoint whose weights are synthetic, with the one-time generation's cost. Its
    weights are identified like a real checkpoint's (ModelSource.weights_identity: the file as
    opened), so a checkpoint changed in place is other weights to the compile cache. Without a
    writable cache the weights are drawn in memory (no checkpoint directory)."""

    materialize_s: float = 0.0  # writing the checkpoint in this process (0 when reused)
    generated: bool = False  # True when this process wrote the checkpoint
    dtype: str = "f16"  # the weights' dtype (f16, bf16, f32)

    def describe(self) -> dict:
        return {
            **super().describe(),
            "weight_format": self.dtype,
            "materialize_s": round(self.materialize_s, 3),
            "synthetic_generated": self.generated,
        }

    def reopen(self) -> ReopenSpec:
        """The checkpoint's directory (the same file, whatever --synthetic-dtype chose), or
        the preset drawn again in memory."""
        if self.model_dir is not None:
            return ReopenSpec(str(self.model_dir))
        return ReopenSpec(self.name, synthetic_dtype=self.dtype)


def synthetic_source(
    preset: str,
    seed: int = SYNTHETIC_SEED,
    dtype: str | None = None,
    root: Path | None = None,
    stream: TextIO | None = None,
) -> ModelSource:
    """A preset with synthetic weights, loaded from its cached checkpoint like a real one.

    When the cache directory cannot be written, the weights are drawn in memory instead (the
    slower-compiling path) with a warning; either way the source is labelled synthetic.
    ``dtype`` None is the published checkpoint's (Preset.dtype).
    """
    cfg = PRESETS[preset].config
    dtype = dtype or PRESETS[preset].dtype
    try:
        ckpt = ensure_checkpoint(preset, seed, dtype, root, stream)
        try:
            loaded = load_checkpoint(ckpt.path, preset)
        except CompileAheadError:  # complete in size but unreadable: write it again
            ckpt = ensure_checkpoint(preset, seed, dtype, root, stream, rewrite=True)
            loaded = load_checkpoint(ckpt.path, preset)
    except OSError as err:
        warnings.warn(
            f"cannot write the synthetic {preset} checkpoint under {root or cache_root()} "
            f"({err.strerror or err}); drawing the weights in memory (compiles slower)",
            SyntheticCheckpointWarning,
            stacklevel=2,
        )
        origin = f"synthetic seed {seed}, exact {preset} shapes, {dtype}, in memory"
        store = SyntheticStore(cfg, seed, dtype=dtype)
        return SyntheticSource(preset, cfg, store, True, origin, dtype=dtype)
    if loaded.config != cfg:
        raise CompileAheadError(
            f"{ckpt.path}: config.json does not read back as the {preset} preset (a bug)"
        )
    return _as_synthetic(loaded, ckpt.identity, ckpt.path, ckpt.materialize_s, ckpt.generated)


def _as_synthetic(
    loaded: ModelSource,
    marker: dict[str, Any],
    path: Path,
    materialize_s: float = 0.0,
    generated: bool = False,
) -> SyntheticSource:
    # The origin is the same on every run (stamps compare it); whether this run wrote the file
    # is in ``generated`` and ``materialize_s``.
    dtype = str(marker.get("dtype"))
    origin = (
        f"synthetic seed {marker.get('seed')}, exact {marker.get('preset')} shapes, {dtype}, "
        f"checkpoint {path}"
    )
    fields_of = {f.name: getattr(loaded, f.name) for f in fields(ModelSource)}
    fields_of |= {"synthetic": True, "origin": origin}
    return SyntheticSource(
        **fields_of, materialize_s=materialize_s, generated=generated, dtype=dtype
    )


def load_synthetic_checkpoint(model_dir: Path, name: str) -> SyntheticSource | None:
    """A synthetic checkpoint directory given by its path (as a compile worker is given the
    run's): the synthetic source it is, or None for any other directory."""
    marker = synthetic_identity(model_dir)
    if marker is None:
        return None
    return _as_synthetic(load_checkpoint(model_dir, name), marker, model_dir)
