"""The commands as a user runs them, each in a fresh process of this interpreter (so in the
virtual environment the tests run in): their command lines, and a run with its output
captured as text."""

from __future__ import annotations

import os
import subprocess
import sys

COMPILE_AHEAD = (sys.executable, "-m", "compile_ahead.commands")
PROFILE_COMPILE = (sys.executable, "-m", "compile_ahead.commands.profile_compile")
TIMEOUT_S = 300.0  # far above any command the tests run; only a hang reaches it

Arg = str | os.PathLike[str] | int | float


def command(*argv: Arg) -> list[str]:
    """``compile-ahead ARGV...`` as a command line."""
    return [*COMPILE_AHEAD, *map(str, argv)]


def profile_compile_command(*argv: Arg) -> list[str]:
    """``profile-compile ARGV...`` as a command line."""
    return [*PROFILE_COMPILE, *map(str, argv)]


def run_cli(*argv: Arg, timeout: float = TIMEOUT_S, **kwargs) -> subprocess.CompletedProcess[str]:
    """``compile-ahead ARGV...`` run to its end, stdout and stderr captured as text."""
    return subprocess.run(command(*argv), capture_output=True, text=True, timeout=timeout, **kwargs)


def run_profile_compile(
    *argv: Arg, timeout: float = TIMEOUT_S, **kwargs
) -> subprocess.CompletedProcess[str]:
    """``profile-compile ARGV...`` run to its end, stdout and stderr captured as text."""
    return subprocess.run(
        profile_compile_command(*argv), capture_output=True, text=True, timeout=timeout, **kwargs
    )
