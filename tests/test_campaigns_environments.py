"""Arms by version: the release's environment is built once with uv, reused, built by one
process when two ask at once, and never used half-built. uv installs a stand-in `openvino`
wheel from a local directory (no network: UV_OFFLINE, UV_NO_INDEX, UV_FIND_LINKS); the check is
what the environment's own interpreter imports."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.campaigns.definition.environments import (
    MARKER,
    ensure_environment,
    environment_dir,
    uv_command,
)

VERSION = "0.1.0"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _stand_in_wheel(directory: Path) -> None:
    """openvino-0.1.0: a package whose get_version() names itself, nothing else."""
    info = f"openvino-{VERSION}.dist-info"
    files = {
        "openvino/__init__.py": f"def get_version():\n    return '{VERSION}-stand-in'\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: openvino\nVersion: {VERSION}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "\n".join([*(_record_line(n, d) for n, d in files.items()), f"{info}/RECORD,,"])
    with zipfile.ZipFile(directory / f"openvino-{VERSION}-py3-none-any.whl", "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{info}/RECORD", record + "\n")


@pytest.fixture
def offline_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    try:
        uv_command()
    except CompileAheadError as err:
        pytest.skip(str(err))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _stand_in_wheel(wheels)
    monkeypatch.setenv("COMPILE_AHEAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setenv("UV_NO_INDEX", "1")
    monkeypatch.setenv("UV_FIND_LINKS", str(wheels))
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS", "never")
    return tmp_path


def _imports(python: Path) -> str:
    proc = subprocess.run(
        [str(python), "-s", "-c", "import openvino; print(openvino.get_version())"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return proc.stdout.strip()


@pytest.mark.slow
def test_built_once_then_reused(offline_index: Path, capsys: pytest.CaptureFixture) -> None:
    python = ensure_environment(VERSION)
    assert _imports(python) == f"{VERSION}-stand-in"
    assert "building the environment of openvino==0.1.0" in capsys.readouterr().err
    marker = (environment_dir(VERSION) / MARKER).stat().st_mtime_ns
    assert ensure_environment(VERSION) == python
    assert "building" not in capsys.readouterr().err
    assert (environment_dir(VERSION) / MARKER).stat().st_mtime_ns == marker


@pytest.mark.slow
def test_two_processes_build_it_once(offline_index: Path) -> None:
    code = (
        "from compile_ahead.profiling.campaigns.definition.environments import ensure_environment; "
        f"print(ensure_environment({VERSION!r}))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]  # fmt: skip
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert outs[0][0] == outs[1][0]
    builds = [ln for _, err in outs for ln in err.splitlines() if ln.startswith("building ")]
    assert len(builds) == 1, outs


@pytest.mark.slow
def test_a_half_built_environment_is_never_used(offline_index: Path) -> None:
    final = environment_dir(VERSION)
    final.mkdir(parents=True)  # a directory without the marker: a build that never completed
    (final / "bin").mkdir()
    leftover = final.with_name(final.name + ".building-99999")
    leftover.mkdir()  # what a killed build leaves
    python = ensure_environment(VERSION)
    assert _imports(python) == f"{VERSION}-stand-in"
    assert (final / MARKER).is_file() and not leftover.exists()


@pytest.mark.slow
def test_a_release_that_cannot_be_installed_leaves_nothing(offline_index: Path) -> None:
    with pytest.raises(CompileAheadError, match=r"the environment of openvino==0\.2\.0: "):
        ensure_environment("0.2.0")
    envs = environment_dir("0.2.0").parent
    assert [p.name for p in envs.iterdir()] == [environment_dir("0.2.0").name + ".lock"]


def test_an_environment_another_user_put_in_a_shared_cache_is_never_run(
    tmp_path: Path, other_user, reachable_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a shared cache root (sticky, as /tmp), another user's envs/ folder holding what looks
    like a built environment is refused in one line: its interpreter is never run."""
    shared = reachable_tmp / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("COMPILE_AHEAD_CACHE_DIR", str(shared))
    major, minor = sys.version_info[:2]
    planted = shared / "envs" / f"openvino-{VERSION}-py{major}{minor}"
    ran = shared / "ran"
    other_user.sh(
        f"mkdir -m 777 -p {planted}/bin && echo '{{}}' > {planted}/{MARKER} && "
        f"printf '#!/bin/sh\\ntouch {ran}\\n' > {planted}/bin/python && "
        f"chmod 755 {planted}/bin/python"
    )
    with pytest.raises(CompileAheadError, match="owned by another user") as refused:
        python = ensure_environment(VERSION)
        subprocess.run([str(python), "-c", "pass"], check=False)  # what a trial would do
    assert "\n" not in str(refused.value)
    assert not ran.exists()
