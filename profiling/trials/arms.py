"""`--arm NAME=SPEC` for OpenVINO installations: which interpreter, which library path, which
compile configuration.

SPEC is a comma-separated list of items:
  PATH               a Python interpreter, a venv directory (PATH/bin/python), or a directory
                     holding an `openvino` package (used as a library path with this interpreter)
  python=PATH        the interpreter, explicitly;  venv=DIR  a venv;  lib=DIR  a library path
  current            this interpreter and its OpenVINO (the default)
  env.VAR=VALUE      an environment variable for the arm's process
  KEY=VALUE          an OpenVINO compile property (e.g. INFERENCE_PRECISION_HINT=f32), read
                     and checked as `--ov-config` is (runtime/compile/settings/properties.py),
                     against the arm's own OpenVINO
  config=FILE.json   the device's entry of a properties file, as `--ov-config-file` reads it
                     ({"CPU": {"KEY": "VALUE"}}); KEY=VALUE items win over its keys, as
                     `--ov-config` wins over `--ov-config-file` (and, as there, a key given
                     twice with different values is refused)
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials.runner import run_bounded
from compile_ahead.runtime.compile.settings.properties import (
    DeviceFacts,
    cannot_compile,
    check_properties,
    device_facts,
    load_properties_file,
    parse_properties,
)


@dataclass(frozen=True)
class ArmSpec:
    name: str
    python: str
    library_path: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)
    text: str = ""

    def process_env(self) -> tuple[dict[str, str], tuple[str, ...]]:
        """(variables to set, variables to drop): an interpreter arm must not inherit our
        PYTHONPATH, a library arm puts its directory first."""
        env = dict(self.env)
        unset: tuple[str, ...] = ()
        if self.library_path:
            env["PYTHONPATH"] = self.library_path
            libs = Path(self.library_path) / "openvino" / "libs"
            if libs.is_dir():
                prior = os.environ.get("LD_LIBRARY_PATH", "")
                env["LD_LIBRARY_PATH"] = str(libs) + (os.pathsep + prior if prior else "")
        elif "PYTHONPATH" not in env:
            unset = ("PYTHONPATH",)
        return env, unset


def _venv_python(directory: Path) -> Path | None:
    for candidate in (directory / "bin" / "python", directory / "bin" / "python3"):
        if candidate.exists():
            return candidate
    return None


def _interpreter(path_text: str, what: str) -> str:
    path = Path(path_text).expanduser()
    if path.is_dir():
        venv = _venv_python(path)
        if venv is None:
            raise CompileAheadError(f"{what}: {path} is a directory without bin/python")
        return str(venv)
    if not path.exists():
        raise CompileAheadError(f"{what}: {path} does not exist")
    if not os.access(path, os.X_OK):
        raise CompileAheadError(f"{what}: {path} is not executable")
    return str(path)


def parse_arm(text: str, device: str = "CPU") -> ArmSpec:
    """One --arm; ``device`` picks a properties file's entry (config=FILE.json)."""
    name, sep, spec = text.partition("=")
    name = name.strip()
    if not sep or not name or not spec.strip():
        raise CompileAheadError(
            f"--arm {text!r}: expected NAME=SPEC, e.g. A=/tmp/ov-a/bin/python or "
            "B=current,INFERENCE_PRECISION_HINT=f32"
        )
    if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise CompileAheadError(f"--arm {text!r}: arm name {name!r} must be alphanumeric")
    python = sys.executable
    library: str | None = None
    env: dict[str, str] = {}
    config: dict[str, str] = {}
    properties: list[str] = []  # KEY=VALUE items, read as --ov-config reads them
    what = f"--arm {name}"
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        key, has_eq, value = item.partition("=")
        if not has_eq:
            if item == "current":
                python = sys.executable
                continue
            path = Path(item).expanduser()
            if not path.exists():
                raise CompileAheadError(
                    f"{what}: {item} does not exist, and the item is not KEY=VALUE "
                    "(a compile property, e.g. INFERENCE_PRECISION_HINT=f32, or env.VAR=VALUE, "
                    "python=PATH, venv=DIR, lib=DIR, config=FILE.json)"
                )
            if path.is_dir() and (path / "openvino").is_dir() and _venv_python(path) is None:
                library = str(path.resolve())
            else:
                python = _interpreter(item, what)
        elif key == "python" or key == "venv":
            python = _interpreter(value, what)
        elif key == "lib":
            lib = Path(value).expanduser()
            if not (lib / "openvino").is_dir():
                raise CompileAheadError(f"{what}: {lib} holds no openvino package")
            library = str(lib.resolve())
        elif key.startswith("env."):
            env[key[4:]] = value
        elif key == "config":
            config |= load_properties_file(value, device, f"{what}: config=")
        else:
            properties.append(item)
    config |= parse_properties(properties, what)
    return ArmSpec(name, python, library, env, config, spec)


# Importing openvino and listing devices takes seconds; an interpreter that has not answered
# in this long is hung (e.g. a wrapper script waiting on something), not slow.
PROBE_TIMEOUT_S = 60.0


def _env_of(arm: ArmSpec) -> dict[str, str]:
    env_set, unset = arm.process_env()
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(env_set)
    return env


def check_arm_properties(arm: ArmSpec, device: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """The arm's KEY=VALUE properties, refused as `--ov-config` refuses them, by the facts of
    the OpenVINO the arm runs (this process's when the arm is this interpreter as it is)."""
    if not arm.config:
        return
    what = f"--arm {arm.name}"
    if arm.python == sys.executable and arm.library_path is None and not arm.env:
        check_properties(arm.config, device_facts(device, arm.config), what)
        return
    from compile_ahead.runtime.compile.settings import property_facts

    script = str(Path(property_facts.__file__).resolve())
    command = [arm.python, "-s", script, device, json.dumps(arm.config)]
    proc = run_bounded(command, env=_env_of(arm), timeout_s=timeout_s)
    try:
        found = json.loads((proc.stdout.strip().splitlines() or [""])[-1])
        facts = DeviceFacts(device, found["supported"], found["value_error"])
    except (ValueError, KeyError, TypeError):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise CompileAheadError(
            f"{what}: cannot ask {arm.python} for {device}'s properties: {last}"
        ) from None
    check_properties(arm.config, facts, what)


# What an interpreter (with its library path and environment) answered for a device: asked
# once per process however often arms running it are made (an A/A copy, a calibration arm).
_PROBED: dict[tuple, dict] = {}


def probe(arm: ArmSpec, device: str, timeout_s: float = PROBE_TIMEOUT_S) -> dict:
    """Ask the arm's interpreter which OpenVINO it loads and whether it compiles for
    ``device`` (property_facts.py's ``--installation``); a clear error if it cannot, or does not
    answer within ``timeout_s`` (its whole process group is then killed)."""
    key = (arm.python, arm.library_path, tuple(sorted(arm.env.items())), device)
    if key not in _PROBED:
        _PROBED[key] = _probe(arm, device, timeout_s)
    return _PROBED[key]


def _probe(arm: ArmSpec, device: str, timeout_s: float) -> dict:
    from compile_ahead.runtime.compile.settings import property_facts

    script = str(Path(property_facts.__file__).resolve())
    command = [arm.python, "-s", script, "--installation", device]
    try:
        proc = run_bounded(command, env=_env_of(arm), timeout_s=timeout_s)
    except OSError as err:
        raise CompileAheadError(f"--arm {arm.name}: cannot run {arm.python}: {err}") from err
    if proc.returncode is None:
        raise CompileAheadError(
            f"--arm {arm.name}: {arm.python} did not report its OpenVINO within {timeout_s:g} s "
            "(hung at start?); killed"
        )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise CompileAheadError(f"--arm {arm.name}: {arm.python} cannot import openvino: {last}")
    try:
        info = json.loads((proc.stdout.strip().splitlines() or [""])[-1])
    except json.JSONDecodeError:
        info = None
    keys = {"openvino", "devices", "compile_ahead", "compile_error"}
    if not isinstance(info, dict) or not keys <= set(info):
        raise CompileAheadError(
            f"--arm {arm.name}: {arm.python} did not print the probe's JSON (is it Python?)"
        )
    if info["compile_error"] is not None:
        release = str(info["openvino"]).split("-")[0]
        raise CompileAheadError(
            f"--arm {arm.name} ({arm.python}, OpenVINO {release}): "
            + cannot_compile(device, info["compile_error"])
        )
    return info
