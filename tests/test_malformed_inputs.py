"""Malformed checkpoints and configs fail in one line through `compile-ahead generate`, naming
the file and the tensor or key, before anything is compiled."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from compile_ahead.commands.main import main

GENERATE = ["--prompt-ids", "1,2", "--max-new-tokens", "1", "--inference-precision", "f32"]


@pytest.fixture
def model_copy(tiny_qwen2_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "model"
    shutil.copytree(tiny_qwen2_dir, target)
    return target


def _generate_error(model_dir: Path, capsys) -> str:
    """Run `generate` on the model; it must fail with exit 2 and a one-line error."""
    code = main(["generate", "--model", str(model_dir), *GENERATE])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def _write_raw(path: Path, header: object, data: bytes) -> None:
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)


def _edit_header(path: Path, edit: Callable[[dict], object]) -> None:
    """Replace the header of a checkpoint by edit(header), keeping the data section."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    _write_raw(path, edit(header), raw[8 + n :])


NORM = "model.norm.weight"


def _set(name: str, key: str, value: object) -> Callable[[dict], dict]:
    def edit(header: dict) -> dict:
        header[name][key] = value
        return header

    return edit


def _drop(name: str, key: str) -> Callable[[dict], dict]:
    def edit(header: dict) -> dict:
        del header[name][key]
        return header

    return edit


def _replace(name: str, value: object) -> Callable[[dict], dict]:
    def edit(header: dict) -> dict:
        header[name] = value
        return header

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda h: list(h.values()), "corrupt safetensors header (a JSON list"),
        (_drop(NORM, "data_offsets"), f"tensor {NORM!r}: data_offsets must be two integers"),
        (_replace(NORM, "F32"), f"tensor {NORM!r}: header entry is a str, not an object"),
        (_set(NORM, "shape", [128]), f"tensor {NORM!r}: shape [128] of F32 needs 512 bytes"),
        (_set(NORM, "data_offsets", [-256, 0]), f"tensor {NORM!r}: data_offsets [-256, 0] must"),
        (_set(NORM, "data_offsets", [0, 10**9]), f"tensor {NORM!r}: data_offsets end 1000000000"),
        (_set(NORM, "data_offsets", [0, "256"]), "data_offsets must be two integers"),
        (_set(NORM, "shape", "64"), "shape must be a list of non-negative integers"),
        (_drop(NORM, "dtype"), f"tensor {NORM!r}: header entry has no dtype"),
    ],
    ids=[
        "list-header",
        "no-data-offsets",
        "string-entry",
        "shape-vs-bytes",
        "negative-offsets",
        "offsets-past-end",
        "string-offset",
        "string-shape",
        "no-dtype",
    ],
)
def test_malformed_safetensors_header(model_copy: Path, capsys, edit, message: str) -> None:
    path = model_copy / "model.safetensors"
    _edit_header(path, edit)
    err = _generate_error(model_copy, capsys)
    assert str(path) in err and message in err


def test_int32_tensor_is_an_unsupported_dtype_not_missing(model_copy: Path, capsys) -> None:
    path = model_copy / "model.safetensors"
    _edit_header(path, _set(NORM, "dtype", "I32"))  # 4 bytes per element, as F32
    err = _generate_error(model_copy, capsys)
    assert "missing" not in err
    assert f"{path}: tensor {NORM!r} has unsupported dtype I32; supported: F32, F16, BF16" in err


def test_header_cut_short_is_truncated(model_copy: Path, capsys) -> None:
    path = model_copy / "model.safetensors"
    path.write_bytes(path.read_bytes()[:200])
    assert "truncated safetensors file (header of" in _generate_error(model_copy, capsys)


def test_well_formed_extra_dtype_tensor_is_ignored(model_copy: Path, capsys) -> None:
    # A tensor the graphs do not read may have any dtype the format defines.
    path = model_copy / "model.safetensors"
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8 : 8 + n]), raw[8 + n :]
    extra = np.arange(4, dtype=np.int32).tobytes()
    header["extra.position_ids"] = {
        "dtype": "I32",
        "shape": [4],
        "data_offsets": [len(data), len(data) + len(extra)],
    }
    _write_raw(path, header, data + extra)
    assert main(["generate", "--model", str(model_copy), *GENERATE]) == 0


def _edit_config(model_dir: Path, **changes: object) -> None:
    path = model_dir / "config.json"
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # transformers 5 keeps rope_parameters; a legacy yarn rope_scaling beside it was dropped
        (
            {"rope_scaling": YARN, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}},
            "rope_scaling: rope scaling type 'yarn' is not implemented",
        ),
        (
            {"rope_scaling": {"type": "dynamic", "factor": 2.0}},
            "rope_scaling: rope scaling type 'dynamic' is not implemented",
        ),
        (
            {"rope_scaling": {"type": "linear", "factor": 2.0}},
            "rope_scaling (linear) and rope_parameters (default) disagree on rope type",
        ),
        (
            {
                "rope_scaling": {"rope_type": "linear", "factor": 2.0},
                "rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4},
            },
            "disagree on factor",
        ),
        ({"rope_scaling": "yarn"}, "rope_scaling must be an object"),
    ],
    ids=["yarn-beside-parameters", "legacy-dynamic", "linear-vs-default", "factors", "string"],
)
def test_rope_scaling_is_refused_never_ignored(
    model_copy: Path, capsys, changes: dict, message: str
) -> None:
    _edit_config(model_copy, **changes)
    err = _generate_error(model_copy, capsys)
    assert str(model_copy / "config.json") in err and message in err


def test_agreeing_rope_keys_are_accepted(model_copy: Path) -> None:
    linear = {"rope_type": "linear", "factor": 2.0}
    _edit_config(model_copy, rope_scaling=linear, rope_parameters={**linear, "rope_theta": 1e4})
    assert main(["generate", "--model", str(model_copy), *GENERATE]) == 0


RUN = ["run", "--model", "tiny", "--ladder", "tiny", "--prompt-len", "8", "--no-progress"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--inject-compile-delay", "inf"], "--inject-compile-delay must be a finite number"),
        (["--inject-compile-delay", "nan"], "--inject-compile-delay must be a finite number"),
        (["--step-delay", "nan"], "--step-delay must be a finite number of seconds >= 0, got nan"),
        (["--step-delay", "inf"], "--step-delay must be a finite number"),
        (["--inject-compile-failure", "32:0"], "--inject-compile-failure 32:0: COUNT must be"),
        (["--ladder", "16,,32"], "--ladder '16,,32': rung 2 is empty"),
        (["--ladder", "16,32,"], "--ladder '16,32,': rung 3 is empty"),
    ],
    ids=["delay-inf", "delay-nan", "step-nan", "step-inf", "count-0", "empty-rung", "trailing"],
)
def test_run_rejects_non_finite_delays_and_empty_rungs(capsys, argv: list[str], message: str):
    code = main([*RUN, *argv])
    err = capsys.readouterr().err.strip()
    last = err.splitlines()[-1]  # progress lines may come first; the error is one line
    assert code == 2 and last.startswith("compile-ahead: error: ") and message in last
    assert "Traceback" not in err


def test_fault_values_are_checked_with_the_run_configuration() -> None:
    from compile_ahead.errors import CompileAheadError
    from compile_ahead.runtime.ladder.settings.capacities import Ladder
    from compile_ahead.runtime.ladder.settings.config import Prompt, RunConfig
    from compile_ahead.runtime.ladder.settings.faults import Faults
    from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
    from conftest import F32

    tiny = Ladder.parse("tiny")

    def config(faults: Faults) -> RunConfig:
        return RunConfig(SCHEDULES["i2"], tiny, Prompt(8), options=F32, faults=faults)

    for bad in ({"compile_delay_s": float("inf")}, {"step_delay_s": float("nan")}):
        with pytest.raises(CompileAheadError, match="finite number of seconds"):
            config(Faults(**bad)).validate()
    with pytest.raises(CompileAheadError, match="capacity must be a positive integer"):
        config(Faults(fail_compiles={-16: 1})).validate()
    with pytest.raises(
        CompileAheadError, match=r"--inject-compile-failure 48: not a rung of the ladder 16,32"
    ):
        config(Faults(fail_compiles={48: 1})).validate()
    faults = Faults(compile_delay_s=0.5, fail_compiles={32: 2}, step_delay_s=0.0)
    assert config(faults).validate().faults is faults
