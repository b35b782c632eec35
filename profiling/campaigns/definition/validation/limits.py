"""How large a campaign may be, and the progress line printed while a large one is checked.

Every cell is checked by `ab`'s own parser before anything is written, every block becomes a
row of the store and a task of an executor, and the report reads them all back: each grows with
the grid. A grid beyond these limits is refused at once with its size, before any cell is made,
so that a slip such as ``pairs = 99999999999999`` never starts a run that cannot end. A larger
study is several campaigns (one store each).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from compile_ahead.errors import CompileAheadError

MAX_CELLS = 10_000  # cells of one campaign: combinations of its axes' values
MAX_BLOCKS = 100_000  # blocks of one campaign: cells x pairs
PROGRESS_FROM_CELLS = 1_000  # a grid this large says that its cells are being checked
PROGRESS_EVERY_S = 2.0  # and then says how far it is, at most this often


def check_grid_size(path: Path, cells: int, pairs: int) -> None:
    """Refuse (one line naming the size and the limit) a grid of more than MAX_CELLS cells or
    MAX_BLOCKS blocks."""
    if cells > MAX_CELLS:
        raise CompileAheadError(
            f"{path}: the axes make {cells:,} cells; a campaign has at most {MAX_CELLS:,} "
            "(split it into several campaigns)"
        )
    blocks = cells * pairs
    if blocks > MAX_BLOCKS:
        raise CompileAheadError(
            f"{path}: {cells:,} cell(s) x {pairs:,} pair(s) make {blocks:,} blocks; a campaign "
            f"has at most {MAX_BLOCKS:,} (fewer pairs, or several campaigns)"
        )


class CheckProgress:
    """``progress(checked, total)`` while cells are checked: for a grid of PROGRESS_FROM_CELLS
    cells or more, a line on ``stream`` (default stderr) at the start, then at most one every
    ``every_s`` seconds, and one at the end."""

    def __init__(self, stream: TextIO | None = None, every_s: float = PROGRESS_EVERY_S):
        self.stream = stream
        self.every_s = every_s
        self.started = self.last = time.monotonic()

    def __call__(self, checked: int, total: int) -> None:
        if total < PROGRESS_FROM_CELLS:
            return
        now = time.monotonic()
        if checked == 1:
            self._say(f"checking the {total:,} cells ...")
        elif checked == total:
            self._say(f"{total:,} cells checked in {now - self.started:.0f} s")
        elif now - self.last >= self.every_s:
            self._say(f"{checked:,} of {total:,} cells checked ...")
        else:
            return
        self.last = now

    def _say(self, text: str) -> None:
        print(f"campaign: {text}", file=self.stream or sys.stderr, flush=True)
