"""A one-line progress display for blocking work (a compile releases the GIL, so a thread can
tick the elapsed time while it runs). Plain lines when stderr is not a terminal."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

from compile_ahead.interrupts import block_interrupts


class ProgressLine:
    def __init__(self, text: str, stream: TextIO | None = None, interval_s: float = 0.25) -> None:
        self.text = text
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        self.live = self.stream.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="progress", daemon=True)
        self._t0 = 0.0

    def __enter__(self) -> ProgressLine:
        self._t0 = time.monotonic()
        try:
            if self.live:
                self._thread.start()
            else:
                print(f"{self.text} ...", file=self.stream, flush=True)
            return self
        except KeyboardInterrupt:  # a line that was started always says how it ended
            self.__exit__(KeyboardInterrupt, None, None)
            raise

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        status = "done" if kind is None else "failed"
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            status = "interrupted"  # Ctrl-C, SIGTERM or SIGHUP: the work was abandoned
        elapsed = time.monotonic() - self._t0
        end = "\r" if self.live else ""
        print(
            f"{end}{self.text}: {status} in {elapsed:.1f} s\x1b[K"
            if self.live
            else f"{self.text}: {status} in {elapsed:.1f} s",
            file=self.stream,
            flush=True,
        )

    def _tick(self) -> None:
        block_interrupts()  # Ctrl-C goes to the main thread
        spinner = "|/-\\"
        i = 0
        while not self._stop.wait(self.interval_s):
            elapsed = time.monotonic() - self._t0
            print(
                f"\r{self.text} {spinner[i % 4]} {elapsed:.1f} s\x1b[K",
                end="",
                file=self.stream,
                flush=True,
            )
            i += 1
