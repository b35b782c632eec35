"""A device this OpenVINO lists but cannot compile for (here: the NPU plugin without its
compiler library) is refused before any model is opened, with one line that carries
OpenVINO's own reason, the same for every command; a refused `ab` leaves no results
directory behind."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from cli import run_cli, run_profile_compile

DEVICE = "NPU"


def _openvino_refusal() -> str:
    """What OpenVINO itself says when a one-op model is compiled on the device: the reason
    after its last source location (the test's independent reference)."""
    import openvino as ov
    from openvino import opset8 as ops

    core = ov.Core()
    if DEVICE not in core.get_versions(DEVICE):
        pytest.skip(reason=f"this OpenVINO has no {DEVICE} plugin")
    param = ops.parameter([1], ov.Type.f32)
    try:
        core.compile_model(ov.Model([ops.relu(param)], [param]), DEVICE)
    except RuntimeError as err:
        last = re.split(r"Exception from \S+:\d+:\s*", str(err))[-1]
        return last.strip().splitlines()[0][:40]
    pytest.skip(reason=f"this machine compiles for {DEVICE}: nothing to refuse")


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return run_cli(*argv)


def test_a_device_that_cannot_compile_is_refused_up_front_by_every_command(tmp_path: Path):
    reason = _openvino_refusal()
    # No such model: a command that opened the model first would say so instead.
    model = str(tmp_path / "no-model-here")
    device = ["--model", model, "--device", DEVICE]
    ab_out = tmp_path / "ab-out"
    arms = ["--arm", "A=current", "--arm", "B=current"]
    commands = {
        "run": lambda: _cli("run", *device, "--ladder", "tiny", "--no-progress"),
        "generate": lambda: _cli("generate", *device, "--prompt-ids", "1,2"),
        "profile-compile": lambda: run_profile_compile(*device, "--out", tmp_path / "prof"),
        "ab schedule": lambda: _cli(
            "ab", "schedule", *device, "--arms", "i1,i2", "--out", str(ab_out)
        ),
        "ab compile": lambda: _cli("ab", "compile", *device, *arms, "--out", str(ab_out)),
    }
    lines = {}
    for name, command in commands.items():
        proc = command()
        assert proc.returncode == 2, (name, proc.stderr[-2000:])
        errors = [x for x in proc.stderr.splitlines() if ": error: " in x]
        assert len(errors) == 1, (name, proc.stderr[-2000:])
        line = errors[0].split(": error: ", 1)[1]
        assert f"--device {DEVICE}: OpenVINO cannot compile for {DEVICE} here: " in line, name
        assert reason in line, (name, reason, line)
        assert "no-model-here" not in proc.stderr, name
        lines[name] = line.split(f"--device {DEVICE}: ", 1)[1]
    assert len(set(lines.values())) == 1, lines  # the same line everywhere
    # Nothing written: a second `ab compile` with the same --out is refused for the device
    # again, not for a directory the first one left.
    assert not ab_out.exists() and not (tmp_path / "prof").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
