"""The block's `ab` process: its output in files, stopped with its trials when we stop or die.

Stopping is SIGTERM to the `ab` process, which `compile-ahead` turns into an interrupt that
kills the running trial's process group (profiling/trials/runner.py), then SIGKILL if it has not
ended in STOP_GRACE_S. Dying (a SIGKILLed coordinator, a Ray worker killed with its node) cannot
run any of our code, so the child asks the kernel for SIGTERM when its parent ends
(PR_SET_PDEATHSIG, set in the child before it execs `ab`; preexec_fn is unsafe in a process with
threads, as a Ray worker has).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from compile_ahead.interrupts import WAIT_SLICE_S

STOP_GRACE_S = 60.0
PR_SET_PDEATHSIG = 1
# Runs as `python -c GUARD PARENT_PID PROGRAM ARGS...`: SIGTERM when the parent ends; if it
# already has (between fork and here), do not start at all.
GUARD = (
    "import ctypes, os, signal, sys\n"
    f"ctypes.CDLL(None).prctl({PR_SET_PDEATHSIG}, signal.SIGTERM)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(130)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def compile_ahead_command(argv: Sequence[str]) -> list[str]:
    """``compile-ahead ARGV`` under this interpreter (-P: the block's working directory is
    never on its import path)."""
    return [sys.executable, "-P", "-m", "compile_ahead.commands", *argv]


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def _stop(proc: subprocess.Popen) -> None:
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()


def run_guarded(command: Sequence[str], workdir: Path, stem: str = "ab") -> int:
    """Run ``command`` in ``workdir`` (stdout and stderr to STEM.out and STEM.err there) and
    return its exit code; interrupted, it is stopped first and the interrupt goes on."""
    argv = [sys.executable, "-P", "-c", GUARD, str(os.getpid()), *command]
    with (workdir / f"{stem}.out").open("wb") as out, (workdir / f"{stem}.err").open("wb") as err:
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            while True:
                try:
                    return proc.wait(timeout=WAIT_SLICE_S)
                except subprocess.TimeoutExpired:
                    continue
        except BaseException:
            _stop(proc)
            raise


def last_line(path: Path) -> str:
    """The last non-empty line of a log (what `compile-ahead` printed as its error)."""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""
