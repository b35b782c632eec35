"""`--batch B` asks the device whether it compiles a graph of B sequences before any rung is
compiled: the CPU does; a device that takes one sequence per graph is refused in one line
(exit 2) with the device's own reason, every command alike, and nothing already produced is
lost. The device that takes one sequence is this machine's CPU with its compile_model
refusing any graph whose leading dimension is above 1 (a sitecustomize on the commands' path,
so the commands run as a user runs them)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli import run_cli, run_profile_compile

from conftest import earlier_output, one_line_error

REFUSAL = "this device compiles one sequence per graph"

# Patches openvino's Core once openvino loads (not before: profile-compile arms the ITT
# collector first), and names every model compiled in $COMPILED_LOG.
ONE_SEQUENCE_DEVICE = f"""
import importlib.abc, importlib.util, os, sys

def _patch(core_class):
    compile_model = core_class.compile_model

    def one_sequence(self, model, *args, **kwargs):
        name = getattr(model, "get_friendly_name", lambda: str(model))()
        with open(os.environ["COMPILED_LOG"], "a") as log:
            log.write(name + "\\n")
        for param in getattr(model, "inputs", ()):
            shape = param.get_partial_shape()
            if shape.rank.get_length() and shape[0].is_static and shape[0].get_length() > 1:
                raise RuntimeError("Exception from src/plugin.cpp:1:\\n{REFUSAL}")
        return compile_model(self, model, *args, **kwargs)

    core_class.compile_model = one_sequence

class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "openvino._ov_api":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module.Core)

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _Finder())
"""


@pytest.fixture
def one_sequence_device(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The environment that makes the CPU take one sequence per graph, and its compile log."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(ONE_SEQUENCE_DEVICE)
    log = tmp_path / "compiled.txt"
    path = os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "COMPILED_LOG": str(log)}, log


def _refused(proc: subprocess.CompletedProcess, prog: str, batch: int) -> None:
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = one_line_error(proc.stderr, prog)
    assert f"--batch {batch}: CPU cannot compile a graph of {batch} sequences here: " in line
    assert REFUSAL in line


def _compiled(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_a_device_without_batches_is_refused_before_any_rung(tmp_path, one_sequence_device):
    env, log = one_sequence_device
    report = tmp_path / "run.json"
    report.write_text("an earlier report")
    run = ["run", "--model", "tiny", "--ladder", "tiny", "--no-progress", "--report", report]
    proc = run_cli(*run, "--prompt-len", "4,10", env=env)
    _refused(proc, "compile-ahead", 2)
    assert report.read_text() == "an earlier report"
    # Only the device probes were compiled: no rung graph, no weight part.
    assert _compiled(log) == ["compile_probe", "batch_probe_N2"], _compiled(log)
    split = run_cli(*run, "--prompt-len", "4,10,7", "--graph", "split", env=env)
    _refused(split, "compile-ahead", 3)
    generate = ["generate", "--model", "tiny", "--max-new-tokens", "4"]
    proc = run_cli(*generate, "--prompt-ids", "1,2", "--prompt-ids", "3", env=env)
    _refused(proc, "compile-ahead", 2)
    # The same device still runs one sequence.
    one = run_cli(*run, "--prompt-len", "4", "--decode-tokens", "2", env=env)
    assert one.returncode == 0, one.stderr[-3000:]
    assert json.loads(report.read_text())["tokens_decoded"] >= 1


def test_profile_compile_refuses_a_batch_the_device_cannot_take(tmp_path, one_sequence_device):
    env, log = one_sequence_device
    out = earlier_output(tmp_path / "prof", {"report.json": "keep me"})
    args = ["--model", "tiny", "--ladder", "16,32", "--out", out]
    proc = run_profile_compile(*args, "--batch", "1,4", env=env)
    _refused(proc, "profile-compile", 4)
    assert (out / "report.json").read_text() == "keep me"
    assert "batch_probe_N4" in _compiled(log)
    assert not any(name.startswith(("decode", "attention")) for name in _compiled(log))


def test_the_cpu_takes_a_batch(tmp_path):
    """No device hook: the probe passes on the CPU and the batch runs."""
    report = tmp_path / "run.json"
    proc = run_cli(
        *["run", "--model", "tiny", "--ladder", "tiny", "--no-progress", "--report", report],
        *["--prompt-len", "4,10", "--decode-tokens", "3"],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(report.read_text())["batch"] == 2


def test_a_campaign_at_a_batch_the_device_refuses_is_refused_before_its_store(
    tmp_path, one_sequence_device
):
    """A campaign's cell check is `ab`'s run configuration check, the device's answer to B
    included: refused before the store exists, not in every trial."""
    env, log = one_sequence_device
    spec = tmp_path / "c.toml"
    spec.write_text(
        '[campaign]\nname = "b"\nkind = "schedule"\npairs = 1\nwarmup = 0\n'
        'arms = ["i1", "i2"]\n[axes]\nmodel = ["tiny"]\nladder = ["16,32"]\nbatch = [1, 4]\n'
        "[options]\ndecode-tokens = 4\n"
    )
    store = tmp_path / "s.sqlite"
    proc = run_cli("campaign", "run", spec, "--store", store, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = one_line_error(proc.stderr)
    assert "--batch 4: CPU cannot compile a graph of 4 sequences here: " in line, line
    assert not store.exists() and not (tmp_path / "s.sqlite.blocks").exists()
    assert not any(name.startswith(("decode", "attention")) for name in _compiled(log))
