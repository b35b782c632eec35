"""Synthetic presets: written once as a checkpoint in the user cache, then read like a real one."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest

from compile_ahead.runtime.base.user_cache import CACHE_DIR_ENV
from compile_ahead.runtime.model import synthetic_checkpoint as sc
from compile_ahead.runtime.model.architecture import config_from_hf
from compile_ahead.runtime.model.presets import PRESETS
from compile_ahead.runtime.model.safetensors_store import SafetensorsStore
from compile_ahead.runtime.model.synthetic_store import SyntheticStore
from compile_ahead.runtime.sources.resolve import resolve_model
from compile_ahead.runtime.sources.synthetic import synthetic_source


@pytest.fixture
def cache_dir(monkeypatch, tmp_path) -> Path:
    import huggingface_hub.constants

    # No real checkpoint may be found, and the synthetic one goes to a fresh directory.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_written_once_then_read_from_the_file(cache_dir):
    first = resolve_model("tiny")
    assert first.synthetic and "SYNTHETIC" in first.label
    assert first.generated and first.describe()["materialize_s"] >= 0
    assert isinstance(first.weights, SafetensorsStore)
    path = first.model_dir
    assert path is not None and path.parent.parent == cache_dir
    weights_file = path / sc.WEIGHTS_FILE
    stamp = weights_file.stat().st_mtime_ns

    second = resolve_model("tiny")
    assert second.synthetic and not second.generated
    assert second.materialize_s == 0.0
    assert isinstance(second.weights, SafetensorsStore)  # memory-mapped, not drawn again
    assert weights_file.stat().st_mtime_ns == stamp
    assert str(path) in second.origin and "seed 0" in second.origin
    assert second.describe()["synthetic"] is True


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_bytes_equal_the_seeded_values(cache_dir, dtype):
    cfg = PRESETS["tiny"].config
    source = synthetic_source("tiny", seed=3, dtype=dtype)
    seeded = SyntheticStore(cfg, 3, dtype=dtype)
    for name in seeded.names():
        on_disk, drawn = source.weights.get(name), seeded.get(name)
        assert on_disk.element_type == drawn.element_type
        assert on_disk.array.tobytes() == drawn.array.tobytes(), name


def test_default_dtype_matches_the_in_memory_store(cache_dir):
    source = resolve_model("tiny")
    seeded = SyntheticStore(PRESETS["tiny"].config, 0)  # what synthetic weights always were
    name = "model.layers.1.mlp.down_proj.weight"
    assert np.array_equal(source.weights.get(name).array, seeded.get(name).array)


def test_keyed_by_seed_and_dtype(cache_dir):
    dirs = {
        synthetic_source("tiny", seed, dtype).model_dir
        for seed, dtype in ((0, "f16"), (1, "f16"), (0, "f32"))
    }
    assert len(dirs) == 3


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_config_reads_back_as_the_preset(preset):
    cfg = PRESETS[preset].config
    assert config_from_hf(sc.hf_config(cfg, "f16")) == cfg


def test_truncated_checkpoint_is_written_again(cache_dir):
    path = synthetic_source("tiny").model_dir
    weights_file = path / sc.WEIGHTS_FILE
    with weights_file.open("r+b") as f:
        f.truncate(weights_file.stat().st_size // 2)
    with pytest.warns(sc.SyntheticCheckpointWarning, match="corrupt"):
        again = synthetic_source("tiny")
    assert again.generated
    assert again.weights.get("model.norm.weight").shape == (PRESETS["tiny"].config.hidden_size,)


def test_no_half_file_under_the_final_name(cache_dir, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sc, "_write", fail)
    with pytest.warns(sc.SyntheticCheckpointWarning, match="in memory"):
        source = synthetic_source("tiny")
    assert source.synthetic and isinstance(source.weights, SyntheticStore)
    final = sc.checkpoint_dir("tiny", 0, "f16")
    assert not final.exists()
    assert not list(final.parent.glob(f".{final.name}.tmp-*"))


def test_progress_is_shown_on_first_write(cache_dir):
    out = io.StringIO()
    sc.ensure_checkpoint("tiny", stream=out)
    assert "writing synthetic tiny weights" in out.getvalue()
    assert "written to" in out.getvalue()
    out = io.StringIO()
    sc.ensure_checkpoint("tiny", stream=out)
    assert out.getvalue() == ""


def _materialize(root: str) -> str:
    ckpt = sc.ensure_checkpoint("tiny", seed=5, root=Path(root), stream=io.StringIO())
    return str(ckpt.path)


def test_concurrent_writers_agree(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        paths = pool.map(_materialize, [str(tmp_path)] * 2)
    assert paths[0] == paths[1]
    final = Path(paths[0])
    assert json.loads((final / sc.CONFIG_FILE).read_text())[sc.MARKER_KEY]["seed"] == 5
    leftovers = [p for p in os.listdir(final.parent) if ".tmp-" in p]
    assert leftovers == []
    store = SafetensorsStore([final / sc.WEIGHTS_FILE])
    seeded = SyntheticStore(PRESETS["tiny"].config, 5)
    assert all(
        store.get(n).array.tobytes() == seeded.get(n).array.tobytes() for n in seeded.names()
    )


def test_not_enough_disk_falls_back_to_memory_before_writing(cache_dir, monkeypatch):
    real = sc.shutil.disk_usage
    monkeypatch.setattr(sc.shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    with pytest.warns(sc.SyntheticCheckpointWarning, match="GB free"):
        source = synthetic_source("tiny")
    assert source.synthetic and isinstance(source.weights, SyntheticStore)
    final = sc.checkpoint_dir("tiny", 0, "f16")
    assert not final.exists() and not list(final.parent.glob(f".{final.name}.tmp-*"))


def test_unreadable_header_is_written_again(cache_dir):
    path = synthetic_source("tiny").model_dir
    with (path / sc.WEIGHTS_FILE).open("r+b") as f:
        f.seek(8)
        f.write(b"\xff" * 32)  # same size, header no longer JSON
    with pytest.warns(sc.SyntheticCheckpointWarning, match="corrupt"):
        again = synthetic_source("tiny")
    assert again.generated
    seeded = SyntheticStore(PRESETS["tiny"].config, 0)
    name = "model.embed_tokens.weight"
    assert again.weights.get(name).array.tobytes() == seeded.get(name).array.tobytes()
