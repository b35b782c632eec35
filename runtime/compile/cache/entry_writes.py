"""The compile cache entries this process is writing: admitted or refused, their temporary
files, and giving them up.

A run admits entries until it ends its writes (``close``; a compile it abandoned then writes
none) and waits for the ones being written (``end``). An interrupted command says on one line
what it waits for, and a second signal gives them up (``give_up``): their temporary files are
removed at once and none is renamed into place after that, so the cache never keeps half an
entry and a report can say which entries were given up. Exiting with writes still going does
the same (interrupts.at_exit). An entry is written in slices so a write given up stops soon.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from compile_ahead import interrupts

WRITE_SLICE = 16 << 20
GIVEN_UP = "not stored: interrupted while it was written (nothing left in the cache)"


class EntryGivenUp(Exception):
    """The entry's write was given up; its temporary file is gone."""


class NewFile(Protocol):
    """A new entry's file under a temporary name (dirs.PrivateFile)."""

    file: BinaryIO

    def commit(self) -> None: ...  # renamed into place
    def discard(self) -> None: ...  # its temporary name removed, from any thread

    def __enter__(self) -> NewFile: ...
    def __exit__(self, *exc: object) -> None: ...


class EntryWrites:
    """One compile cache's writes in this process (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        # The entries being exported or written now, by the thread writing each (a write is
        # one thread's, from admit to release).
        self._active: dict[int, Path] = {}
        self._files: set[NewFile] = set()  # their files, under temporary names
        self._ended: str | None = None  # why no entry is admitted now (None: admitted)
        self._given_up = threading.Event()  # set: no entry being written is completed
        self.delay_s = 0.0  # fault injection: every write pauses this long (begin)
        interrupts.at_exit(self.give_up)

    def begin(self, delay_s: float = 0.0) -> None:
        with self._lock:
            self._ended = None
            self._given_up.clear()
            self.delay_s = delay_s

    def close(self, why: str) -> None:
        """No entry is admitted from now on; ``why`` is what a refused one's outcome says."""
        with self._lock:
            if self._ended is None:
                self._ended = f"not stored: {why}"

    def end(self) -> None:
        """Close, then wait for the entries being written (interrupts.wait_out)."""
        self.close("the run had ended")
        interrupts.wait_out(self.in_progress, self._wait, self.give_up)

    def in_progress(self) -> list[str]:
        with self._lock:
            return ["a compile cache entry"] * len(self._active)

    def _wait(self, timeout: float) -> None:
        with self._lock:
            self._done.wait_for(lambda: not self._active, timeout)

    def give_up(self) -> set[Path]:
        """Abandon the entries being written: their temporary files are removed now, none is
        renamed into place after this and none is admitted. Returns the entries given up."""
        with self._lock:
            self._ended = "not stored: interrupted"
            self._given_up.set()
            for new in self._files:
                with contextlib.suppress(OSError):
                    new.discard()
            self._files.clear()
            return set(self._active.values())

    def admit(self, entry: Path) -> str | None:
        """Count ``entry`` as being written, or say why it is refused."""
        with self._lock:
            if self._ended is not None:
                return self._ended
            self._active[threading.get_ident()] = entry
        return None

    def release(self) -> None:
        """The calling thread's write is over (written, failed or given up)."""
        with self._lock:
            self._active.pop(threading.get_ident(), None)  # unless published already
            self._done.notify_all()

    @contextlib.contextmanager
    def new_file(self, create: Callable[[], NewFile]) -> Iterator[NewFile]:
        """The file ``create`` makes, registered for give_up as it is made, until the block
        ends (before the file object closes its directory)."""
        with self._lock:
            if self._given_up.is_set():
                raise EntryGivenUp
            new = create()
            self._files.add(new)
        with new:
            try:
                yield new
            finally:
                with self._lock:
                    self._files.discard(new)

    def write_blob(self, f: BinaryIO, view: memoryview) -> None:
        """The blob in slices, stopping at the first after a give_up."""
        if self.delay_s > 0:
            self._given_up.wait(self.delay_s)
        for start in range(0, len(view), WRITE_SLICE):
            if self._given_up.is_set():
                raise EntryGivenUp
            f.write(view[start : start + WRITE_SLICE])

    def publish(self, new: NewFile) -> None:
        """Rename the whole entry into place, unless its write was given up meanwhile."""
        with self._lock:
            if self._given_up.is_set():
                raise EntryGivenUp
            new.commit()
            del self._active[threading.get_ident()]
