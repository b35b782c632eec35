"""Process resident memory, sampled on a background thread on the monotonic clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from compile_ahead.interrupts import block_interrupts
from compile_ahead.runtime.base.measure import rss_bytes


class RssSampler:
    """Samples RSS every ``interval_s`` until stopped; ``on_sample(ts_ns, bytes)`` is called from
    the sampling thread (e.g. to put the value on a trace counter track)."""

    def __init__(
        self, interval_s: float = 0.05, on_sample: Callable[[int, int], None] | None = None
    ) -> None:
        self.interval_s = interval_s
        self.on_sample = on_sample
        self.samples: list[tuple[int, int]] = []
        self.error: Exception | None = None  # what on_sample raised; it is not called again
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def start(self) -> RssSampler:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def sample(self) -> int:
        # The clock is read under the lock: samples reach on_sample (one trace counter
        # track) in time order whichever thread takes them.
        with self._lock:
            ts, value = time.monotonic_ns(), rss_bytes()
            self.samples.append((ts, value))
            if self.on_sample is not None:
                try:
                    self.on_sample(ts, value)
                except Exception as err:  # e.g. a closed trace: keep sampling, report it
                    self.error, self.on_sample = err, None
        return value

    def peak_between(self, begin_ns: int, end_ns: int) -> int | None:
        with self._lock:
            inside = [v for ts, v in self.samples if begin_ns <= ts <= end_ns]
        return max(inside) if inside else None

    def _run(self) -> None:
        block_interrupts()  # Ctrl-C goes to the main thread
        while not self._stop.wait(self.interval_s):
            self.sample()
