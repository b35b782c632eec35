"""Model resolution and every bad-input error it promises."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.presets import PRESETS
from compile_ahead.runtime.model.synthetic_store import SyntheticStore
from compile_ahead.runtime.model.weights import expected_shapes
from compile_ahead.runtime.sources.resolve import resolve_model


@pytest.fixture
def qwen_copy(tiny_qwen2_dir, tmp_path) -> Path:
    target = tmp_path / "model"
    shutil.copytree(tiny_qwen2_dir, target)
    return target


def _edit_config(model_dir: Path, **changes) -> None:
    path = model_dir / "config.json"
    cfg = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    path.write_text(json.dumps(cfg))


def _point_hf_cache_at(monkeypatch, path: Path) -> None:
    # huggingface_hub reads HF_HUB_CACHE at import; patch the resolved constant it uses.
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(path))


def _error(name: str) -> str:
    with pytest.raises(CompileAheadError) as info:
        resolve_model(name)
    return str(info.value)


def test_checkpoint_directory_is_real_weights(tiny_qwen2_dir):
    source = resolve_model(str(tiny_qwen2_dir))
    assert not source.synthetic
    assert "real weights" in source.label
    assert source.config.architecture == "qwen2" and source.config.num_layers == 2


def test_preset_without_cache_is_labelled_synthetic(monkeypatch, tmp_path):
    _point_hf_cache_at(monkeypatch, tmp_path)
    source = resolve_model("tiny")
    assert source.synthetic
    assert "SYNTHETIC" in source.label
    assert source.describe()["synthetic"] is True


def test_preset_prefers_a_cached_real_checkpoint(monkeypatch, tmp_path, tiny_qwen2_dir):
    # Lay out a hub-cache entry for the tinyllama preset's first hub id by hand.
    repo = PRESETS["tinyllama-1.1b"].hub_ids[0]
    entry = tmp_path / ("models--" + repo.replace("/", "--"))
    snapshot = entry / "snapshots" / ("0" * 40)
    shutil.copytree(tiny_qwen2_dir, snapshot)
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("0" * 40)
    _point_hf_cache_at(monkeypatch, tmp_path)
    source = resolve_model("tinyllama-1.1b")
    assert not source.synthetic
    assert repo in source.name


def test_synthetic_weights_have_exact_shapes_and_are_seeded():
    cfg = PRESETS["tiny"].config
    a, b = SyntheticStore(cfg, seed=0), SyntheticStore(cfg, seed=0)
    for name, shape in expected_shapes(cfg).items():
        assert a.get(name).shape == shape
    name = "model.layers.1.mlp.up_proj.weight"
    np.testing.assert_array_equal(a.get(name).array, b.get(name).array)
    assert not np.array_equal(a.get(name).array, SyntheticStore(cfg, seed=1).get(name).array)


def test_unknown_name():
    assert "presets: qwen2.5-0.5b" in _error("no-such-model")


def test_hub_id_not_in_cache(monkeypatch, tmp_path):
    _point_hf_cache_at(monkeypatch, tmp_path)
    assert "not found in the local Hugging Face cache" in _error("someone/some-model")


def test_file_instead_of_directory(tmp_path):
    f = tmp_path / "model.safetensors"
    f.write_text("x")
    assert "is a file" in _error(str(f))
    ir = tmp_path / "model.xml"  # an IR path: its weights must sit beside it
    ir.write_text("<net/>")
    assert "its weights file model.bin is missing" in _error(str(ir))


def test_missing_config(tmp_path):
    assert "no config.json" in _error(str(tmp_path))


def test_unreadable_config(qwen_copy):
    (qwen_copy / "config.json").write_text("{not json")
    assert "config.json: cannot read" in _error(str(qwen_copy))


def test_unsupported_architecture_lists_supported(qwen_copy):
    _edit_config(qwen_copy, architectures=["MistralForCausalLM"])
    msg = _error(str(qwen_copy))
    assert (
        "unsupported architecture" in msg
        and "Qwen2ForCausalLM" in msg
        and "LlamaForCausalLM" in msg
    )


def test_inconsistent_heads(qwen_copy):
    _edit_config(qwen_copy, num_key_value_heads=3)
    assert "not a multiple of num_key_value_heads" in _error(str(qwen_copy))


def test_missing_config_key(qwen_copy):
    _edit_config(qwen_copy, hidden_size=None)
    assert "'hidden_size' is missing" in _error(str(qwen_copy))


def test_unimplemented_rope_scaling_is_refused(qwen_copy):
    _edit_config(qwen_copy, rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4})
    assert "'yarn' is not implemented" in _error(str(qwen_copy))


def test_no_weights(qwen_copy):
    (qwen_copy / "model.safetensors").unlink()
    assert "no *.safetensors" in _error(str(qwen_copy))


def _rewrite_safetensors(path: Path, edit) -> None:
    """Rewrite a checkpoint with its header edited (tensor data re-laid out to match)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    tensors = {
        k: data[v["data_offsets"][0] : v["data_offsets"][1]]
        for k, v in header.items()
        if k != "__metadata__"
    }
    infos = {k: v for k, v in header.items() if k != "__metadata__"}
    edit(infos, tensors)
    out, offset = {}, 0
    for k, info in infos.items():
        blob = tensors[k]
        out[k] = {**info, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
    head = json.dumps(out).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(tensors[k] for k in infos))


def test_missing_weight(qwen_copy):
    def drop(infos, tensors):
        del infos["model.layers.1.mlp.up_proj.weight"]

    _rewrite_safetensors(qwen_copy / "model.safetensors", drop)
    assert "'model.layers.1.mlp.up_proj.weight' is missing" in _error(str(qwen_copy))


def test_wrong_weight_shape(qwen_copy):
    def reshape(infos, tensors):
        infos["model.norm.weight"]["shape"] = [32, 2]

    _rewrite_safetensors(qwen_copy / "model.safetensors", reshape)
    assert "'model.norm.weight' has shape [32, 2], expected [64]" in _error(str(qwen_copy))


def test_truncated_weights(qwen_copy):
    path = qwen_copy / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    assert "truncated" in _error(str(qwen_copy))


def test_bf16_checkpoint_loads_exactly(qwen_copy):
    from compile_ahead.runtime.base.precision import f32_to_bf16_bits

    def to_bf16(infos, tensors):
        for k, info in infos.items():
            values = np.frombuffer(tensors[k], np.float32)
            tensors[k] = f32_to_bf16_bits(values).tobytes()
            info["dtype"] = "BF16"

    original = resolve_model(str(qwen_copy)).weights.get("model.norm.weight").to_float32()
    _rewrite_safetensors(qwen_copy / "model.safetensors", to_bf16)
    loaded = resolve_model(str(qwen_copy)).weights.get("model.norm.weight")
    assert loaded.array.dtype == np.uint16
    np.testing.assert_allclose(loaded.to_float32(), original, rtol=2**-8)
