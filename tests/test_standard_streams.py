"""A closed or full standard output through the public commands: the files are written, no
traceback or abort, and a defined exit code (141 for a closed pipe, 2 with one line for any
other failure; streams.py).

``PYTHONUNBUFFERED=1`` makes every print reach the pipe at once (as on a terminal), so a
failing write happens where the command prints, not only at its last flush.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from child_process import CLI, DEADLINE_S, PROFILE, no_crash

TINY_RUN = [*CLI, "run", "--model", "tiny", "--ladder", "tiny", "--no-progress"]
GENERATE = [*CLI, "generate", "--model", "tiny", "--prompt-ids", "1,2,3", "--max-new-tokens", "4"]
FULL = "No space left on device"

needs_dev_full = pytest.mark.skipif(
    not Path("/dev/full").exists(), reason="/dev/full (writes fail: no space) is Linux's"
)


def _run(argv: list[str], stdout: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        argv, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, timeout=DEADLINE_S
    )


def _head_1(argv: list[str]) -> tuple[subprocess.CompletedProcess[str], bytes]:
    """``argv | head -1``: the reader closes the pipe after the first line."""
    read_end, write_end = os.pipe()
    first: list[bytes] = []

    def head() -> None:
        with os.fdopen(read_end, "rb") as pipe:
            first.append(pipe.readline())

    reader = threading.Thread(target=head)
    reader.start()
    try:
        done = _run(argv, write_end)
    finally:
        os.close(write_end)
        reader.join(DEADLINE_S)
    return done, first[0]


def _gone_reader() -> int:
    """A pipe's write end whose reader is gone (``| head -1`` that has its line already)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    return write_end


def _quiet(done: subprocess.CompletedProcess[str]) -> bool:
    return no_crash(done.stderr) and "Exception" not in done.stderr


def test_run_to_a_closed_pipe_still_writes_its_report(tmp_path):
    report = tmp_path / "r.json"
    write_end = _gone_reader()
    try:
        done = _run([*TINY_RUN, "--report", str(report)], write_end)
    finally:
        os.close(write_end)
    assert done.returncode == 141 and _quiet(done), done.stderr[-3000:]
    assert json.loads(report.read_text())["stop_reason"] == "completed"


@needs_dev_full
def test_run_to_a_full_disk_still_writes_its_report(tmp_path):
    report = tmp_path / "r.json"
    with open("/dev/full", "w") as full:
        done = _run([*TINY_RUN, "--report", str(report)], full.fileno())
    assert done.returncode == 2 and _quiet(done), done.stderr[-3000:]
    assert done.stderr.splitlines()[-1] == f"compile-ahead: error: standard output: {FULL}"
    assert json.loads(report.read_text())["stop_reason"] == "completed"


def test_generate_piped_to_head_ends_quietly():
    done, first = _head_1(GENERATE)
    assert first.startswith(b"model: tiny")
    assert done.returncode == 141 and _quiet(done), done.stderr[-3000:]


@needs_dev_full
def test_generate_json_to_a_full_disk_is_one_line():
    with open("/dev/full", "w") as full:
        done = _run([*GENERATE, "--json"], full.fileno())
    assert done.returncode == 2 and _quiet(done), done.stderr[-3000:]
    assert done.stderr.splitlines()[-1] == f"compile-ahead: error: standard output: {FULL}"


def test_profile_compile_piped_to_head_publishes_its_profile(tmp_path):
    out = tmp_path / "out"
    done, first = _head_1([*PROFILE, "--model", "tiny", "--ladder", "16", "--out", str(out)])
    assert first.startswith(b"model: tiny")
    assert done.returncode == 141 and _quiet(done), done.stderr[-3000:]
    assert json.loads((out / "report.json").read_text())["error"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging directory left
