"""A command in a child process that a test signals at a phase it finds by polling (the child's
stderr, its mapped libraries, its threads, files it writes), never by sleeping a fixed time.
Deadlines are generous: they are reached only when the command hangs or never gets there."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cli import COMPILE_AHEAD, PROFILE_COMPILE

CLI = list(COMPILE_AHEAD)
PROFILE = list(PROFILE_COMPILE)
DEADLINE_S = 240.0
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
SIGNAL_IDS = ["SIGINT", "SIGTERM", "SIGHUP"]
# What a crashed interpreter or library prints; never part of an interrupted command's output.
CRASH_MARKS = ("Traceback", "terminate called", "Fatal Python error", "Segmentation fault")


class Child:
    """``argv`` running with stderr collected line by line (stdout: ``stdout``, else kept)."""

    def __init__(self, argv: list[str], stdout: int | None = None, env: dict | None = None):
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE if stdout is None else stdout,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self.out = ""
        self._changed = threading.Condition()
        readers = [threading.Thread(target=self._read_err, daemon=True)]
        if stdout is None:
            readers.append(threading.Thread(target=self._read_out, daemon=True))
        for reader in readers:
            reader.start()
        self._readers = readers

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        self.out = self.proc.stdout.read()

    @property
    def err(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def wait_for_line(self, wanted: Callable[[str], bool], what: str) -> str:
        """The first stderr line ``wanted`` accepts; fails at the deadline or if the child
        exits first."""
        deadline = time.monotonic() + DEADLINE_S
        seen = 0
        with self._changed:
            while True:
                for line in self.lines[seen:]:
                    if wanted(line):
                        return line
                seen = len(self.lines)
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"never saw {what}; stderr:\n{self.err[-3000:]}")
                self._changed.wait(0.05)

    def wait_until(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"never saw {what}; stderr:\n{self.err[-3000:]}")
            time.sleep(0.005)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def finish(self) -> int:
        """The exit code, once the child has exited (killed at the deadline: a hang)."""
        try:
            code = self.proc.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"hung; stderr:\n{self.err[-3000:]}") from None
        for reader in self._readers:
            reader.join(30)
        return code

    def mapped(self, library: str) -> bool:
        """Whether the child has mapped a file whose path holds ``library``."""
        try:
            return library.encode() in Path(f"/proc/{self.proc.pid}/maps").read_bytes()
        except OSError:
            return False

    def has_thread(self, name: str) -> bool:
        """Whether one of the child's threads has this OS name (15 bytes at most are kept)."""
        try:
            tasks = os.listdir(f"/proc/{self.proc.pid}/task")
        except OSError:
            return False
        for task in tasks:
            try:
                comm = Path(f"/proc/{self.proc.pid}/task/{task}/comm").read_text().strip()
            except OSError:
                continue
            if comm == name[:15]:
                return True
        return False

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def no_crash(err: str) -> bool:
    return not any(mark in err for mark in CRASH_MARKS)


def sibling_or_self(path: Path) -> Path:
    """The report of an interrupted run: the failed sibling (``r.failed.json``) where the
    command keeps a good earlier report apart, else the path itself."""
    failed = path.with_name(f"{path.stem}.failed{path.suffix}")
    return failed if failed.exists() else path
