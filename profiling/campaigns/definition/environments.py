"""An OpenVINO release's own environment, built once per machine with uv and reused.

``openvino==X.Y.Z`` becomes ``CACHE/envs/openvino-X.Y.Z-pyMN`` (the user cache of
runtime/base/user_cache.py; MN is this interpreter's version, which the environment uses): a
relocatable venv with that release and its dependencies. CACHE/envs is private to this user
(``_envs_dir``), since its interpreters are run. A compile trial needs nothing else
(profiling/trials/compile_kind/trial.py runs on the standard library, openvino and numpy).

It is built under a temporary name and renamed into place only once its interpreter imports
that very release, so a half-built environment (a killed build, a full disk) is never used; a
lock file makes a second process wait for the first build instead of building it again, and
the next build clears what a killed one left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.user_cache import cache_lock, cache_root
from compile_ahead.runtime.compile.cache.dirs import UntrustedPath, open_base

MARKER = "compile-ahead-env.json"
_BUILDING = ".building-"
_VERIFY = "import openvino, sys; print(openvino.get_version())"


def environment_dir(version: str) -> Path:
    major, minor = sys.version_info[:2]
    return _envs_dir() / f"openvino-{version}-py{major}{minor}"


def _envs_dir() -> Path:
    """CACHE/envs (this user's uid-N folder in it in a shared cache root), made 0700 and
    checked as the compile cache checks its own directories (compile/cache/dirs.py): the
    interpreters kept there are run, so no other user may be able to put one there."""
    envs = cache_root() / "envs"
    try:
        base = open_base(envs, create=True, own_root=True)
    except (UntrustedPath, OSError) as err:
        raise CompileAheadError(f"release environments cannot be kept in {envs}: {err}") from None
    if base.fd is not None:
        os.close(base.fd)
    return base.path


def _python(directory: Path) -> Path:
    return directory / "bin" / "python"


def uv_command() -> list[str]:
    """The uv executable: the `uv` package's binary, else one on PATH."""
    try:
        from uv import find_uv_bin

        return [find_uv_bin()]
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv")
    if found is None:
        raise CompileAheadError(
            "arms named by version (openvino==X.Y.Z) build their environment with uv, which is "
            "not installed: pip install uv (or compile-ahead[cluster])"
        )
    return [found]


def _run(command: list[str], what: str) -> str:
    try:
        proc = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except OSError as err:
        raise CompileAheadError(f"{what}: cannot run {command[0]}: {err.strerror}") from None
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()] or ["no output"]
        raise CompileAheadError(f"{what}: {lines[-1].strip()}")
    return proc.stdout


def _build(tmp: Path, version: str, what: str) -> str:
    """Create the venv in ``tmp``, install the release, and return the build it imports."""
    uv = uv_command()
    _run([*uv, "venv", "--quiet", "--relocatable", "--python", sys.executable, str(tmp)], what)
    python = str(_python(tmp))
    _run([*uv, "pip", "install", "--quiet", "--python", python, f"openvino=={version}"], what)
    build = _run([python, "-s", "-c", _VERIFY], what).strip().splitlines()[-1]
    if not build.startswith(version):
        raise CompileAheadError(f"{what}: the environment imports OpenVINO {build}, not {version}")
    return build


def built_environment(version: str) -> Path | None:
    """The interpreter of ``openvino==version``'s environment if this machine has built it."""
    final = environment_dir(version)
    return _python(final) if (final / MARKER).is_file() else None


def ensure_environment(version: str, stream: TextIO | None = None) -> Path:
    """The interpreter of ``openvino==version``'s environment, built now if this machine has
    none. One line if it cannot be built (no uv, no such release, no network)."""
    stream = stream or sys.stderr
    final = environment_dir(version)
    if (final / MARKER).is_file():
        return _python(final)
    what = f"the environment of openvino=={version}"
    with cache_lock(final.with_name(final.name + ".lock"), what, stream):
        if (final / MARKER).is_file():  # built while we waited
            return _python(final)
        for leftover in final.parent.glob(f"{final.name}{_BUILDING}*"):
            shutil.rmtree(leftover, ignore_errors=True)  # a killed build's; we hold the lock
        shutil.rmtree(final, ignore_errors=True)  # no marker: never completed
        tmp = final.with_name(f"{final.name}{_BUILDING}{os.getpid()}")
        print(f"building {what} in {final} (uv) ...", file=stream, flush=True)
        t0 = time.monotonic()
        try:
            build = _build(tmp, version, what)
            marker = {"version": version, "openvino": build, "python": sys.version.split()[0]}
            (tmp / MARKER).write_text(json.dumps(marker))
            os.rename(tmp, final)
        except OSError as err:
            raise CompileAheadError(f"{what}: cannot write {tmp}: {err.strerror}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"built {what} ({build}) in {time.monotonic() - t0:.0f} s", file=stream, flush=True)
    return _python(final)
