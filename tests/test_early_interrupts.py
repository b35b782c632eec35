"""Ctrl-C while a console script is still loading its modules: exit 130 with one line, never a
KeyboardInterrupt traceback (nor, for SIGTERM, a death without a word).

The child runs with PYTHONPROFILEIMPORTTIME, which prints a line on stderr as each module
finishes loading: the test signals once the command has loaded a module that every command
loads at its start (then after a delay), found by polling its stderr, as child_process.py does.
What runs before the interpreter hands over to the script (its own start-up, site and .pth
files) is not the command's and is not signalled here.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from child_process import CLI, Child, no_crash

BIN = Path(sys.executable).parent
# Every console script, with a command line that loads the trial or profiling machinery.
SCRIPTS = {
    "compile-ahead": ([str(BIN / "compile-ahead")], ["ab", "compile", "--model", "tiny"]),
    "profile-compile": ([str(BIN / "profile-compile")], ["--model", "tiny", "--ladder", "16"]),
    "python -m compile_ahead.commands": (CLI, ["ab", "compile", "--model", "tiny"]),
}
# Modules every command loads at its start, each taking time (a signal right after one of
# them loads lands while the next ones load).
LOADED_AT_START = ("concurrent.futures", "compile_ahead.interrupts", "compile_ahead.outputs")
DELAYS_S = (0.0, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.2, 0.3)


_runs = itertools.count()


def _command(name: str, tmp_path: Path) -> list[str]:
    script, argv = SCRIPTS[name]
    if not Path(script[0]).exists():
        pytest.skip(f"{script[0]} is not installed beside {sys.executable}")
    arms = ["--arm", "A=current", "--arm", "B=current"] if argv[0] == "ab" else []
    return [*script, *argv, *arms, "--out", str(tmp_path / "out")]


def _loaded(module: str):
    return lambda line: (
        line.startswith("import time:") and line.rsplit("|", 1)[-1].strip() == module
    )


def _interrupted(argv: list[str], module: str, delay: float, sig: int = signal.SIGINT) -> None:
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    with Child([*argv[:-1], f"{argv[-1]}{next(_runs)}"], env=env) as child:  # a new --out
        child.wait_for_line(_loaded(module), f"{module} loaded")
        time.sleep(delay)
        child.signal(sig)
        code = child.finish()
    said = [line for line in child.lines if not line.startswith("import time:")]
    where = f"{module} + {delay} s"
    assert code == 130, f"{where}: exit {code}\n" + "\n".join(said)[-3000:]
    assert no_crash(child.err), f"{where}:\n" + "\n".join(said)[-3000:]
    assert said[-1].endswith(": interrupted"), f"{where}: {said}"


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_ctrl_c_while_a_console_script_loads_exits_130_without_a_traceback(name, tmp_path):
    argv = _command(name, tmp_path)
    for module in LOADED_AT_START:
        _interrupted(argv, module, 0.0)
    for delay in DELAYS_S:
        _interrupted(argv, LOADED_AT_START[0], delay)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_while_a_console_script_loads_exits_130(sig, tmp_path):
    argv = _command("compile-ahead", tmp_path)
    _interrupted(argv, LOADED_AT_START[0], 0.0, sig)
