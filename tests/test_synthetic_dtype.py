"""Synthetic presets in the published checkpoint's dtype, --synthetic-dtype for another, and the
dtype named wherever the model is."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import openvino as ov
import pytest
from cli import run_profile_compile

from compile_ahead.commands.main import main
from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.user_cache import CACHE_DIR_ENV
from compile_ahead.runtime.model import presets
from compile_ahead.runtime.model.safetensors_store import SafetensorsStore
from compile_ahead.runtime.sources.resolve import resolve_model

# The published config.json's torch_dtype of each preset's checkpoint.
PUBLISHED = {"qwen2.5-0.5b": "bf16", "qwen2.5-1.5b": "bf16", "qwen2.5-7b": "bf16"}
PUBLISHED["tinyllama-1.1b"] = "bf16"

RUN = ["run", "--model", "tiny", "--ladder", "tiny", "--schedule", "i2", "--no-progress"]
RUN += ["--inference-precision", "f32", "--prompt-len", "8", "--decode-tokens", "30"]


@pytest.fixture
def cache_dir(monkeypatch, tmp_path) -> Path:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_presets_carry_the_published_dtype():
    checkpoints = {n: p for n, p in presets.PRESETS.items() if p.gguf_package is None}
    assert {name: p.dtype for name, p in checkpoints.items() if name != "tiny"} == PUBLISHED


def test_a_preset_is_written_in_its_dtype_unless_told(cache_dir, monkeypatch):
    tiny = presets.PRESETS["tiny"]
    monkeypatch.setitem(presets.PRESETS, "tiny", dataclasses.replace(tiny, dtype="bf16"))
    published = resolve_model("tiny")
    assert published.describe()["weight_format"] == "bf16"
    assert ", bf16, checkpoint" in published.label and "-bf16-" in str(published.model_dir)
    assert isinstance(published.weights, SafetensorsStore)
    assert published.weights.get("model.norm.weight").element_type == ov.Type.bf16
    chosen = resolve_model("tiny", synthetic_dtype="f32")
    assert chosen.describe()["weight_format"] == "f32" and ", f32, checkpoint" in chosen.label
    assert chosen.model_dir != published.model_dir


def test_a_synthetic_checkpoint_directory_is_synthetic(cache_dir):
    """Given by its path (a compile worker is), it is the same synthetic weights."""
    preset = resolve_model("tiny", synthetic_dtype="bf16")
    by_path = resolve_model(str(preset.model_dir))
    assert by_path.synthetic and "SYNTHETIC" in by_path.label
    assert by_path.weights_identity() == preset.weights_identity()
    assert by_path.origin == preset.origin and by_path.describe()["weight_format"] == "bf16"
    with pytest.raises(CompileAheadError, match="holds synthetic bf16 weights"):
        resolve_model(str(preset.model_dir), synthetic_dtype="f16")


def test_synthetic_dtype_is_refused_for_real_weights(tiny_qwen2_dir):
    with pytest.raises(CompileAheadError, match=r"--synthetic-dtype bf16: .* has real weights"):
        resolve_model(str(tiny_qwen2_dir), synthetic_dtype="bf16")


def test_run_names_the_dtype_everywhere(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = [*RUN, "--synthetic-dtype", "bf16", "--report", str(out), "--no-cache"]
    assert main([*argv, "--trace", str(tmp_path / "t.pftrace")]) == 0
    printed = capsys.readouterr()
    assert "exact tiny shapes, bf16" in printed.err  # the model line
    assert "weights bf16" in printed.out  # the summary
    report = json.loads(out.read_text())
    assert report["weight_format"] == "bf16" and ", bf16, " in report["origin"]
    assert b"exact tiny shapes, bf16" in (tmp_path / "t.pftrace").read_bytes()


def test_a_compile_worker_compiles_the_chosen_dtype(tmp_path):
    """The worker resolves the run's checkpoint, not the preset's default dtype: the same
    logits as compiling in the process."""
    reports = {}
    for placement in ("in-process", "worker"):
        out = tmp_path / f"{placement}.json"
        argv = [*RUN, "--synthetic-dtype", "bf16", "--compile-placement", placement]
        assert main([*argv, "--no-cache", "--report", str(out)]) == 0
        reports[placement] = json.loads(out.read_text())
    digests = {
        p: {e["context"]: e["logits_digest"] for e in r["boundary_tokens"]}
        for p, r in reports.items()
    }
    assert digests["worker"] == digests["in-process"]
    assert any(j["background"] for j in reports["worker"]["compile_jobs"])


def test_generate_takes_it(tmp_path, capsys):
    argv = ["generate", "--model", "tiny", "--prompt-ids", "1,2", "--max-new-tokens", "2"]
    assert main([*argv, "--synthetic-dtype", "f32", "--no-cache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["weight_format"] == "f32"


def test_profile_compile_takes_it(tmp_path):
    out = tmp_path / "p"
    argv = ["--model", "tiny", "--ladder", "16", "--synthetic-dtype", "bf16", "--out", str(out)]
    proc = run_profile_compile(*argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "exact tiny shapes, bf16" in proc.stdout
    assert json.loads((out / "report.json").read_text())["model"]["weight_format"] == "bf16"
