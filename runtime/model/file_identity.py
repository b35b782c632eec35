"""A weights file's identity as it was opened (the compile cache's key names it), and whether a
later write could keep that identity (a write within the same clock tick)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def file_identity(path: Path, st: os.stat_result) -> dict[str, Any]:
    """A file as it was when opened. ctime and the inode cannot be set back by a user (mtime
    can, with ``touch -r``): a file rewritten in place or replaced gets another identity."""
    return {
        "path": str(path.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "inode": st.st_ino,
        "device": st.st_dev,
    }


# ctime comes from the kernel's coarse clock (one tick) and a file system's time granularity: a
# write within the tick of the last change leaves ctime as it was. A file opened later than this
# after its last change gets a new ctime from any later write.
_COARSE_TICK_NS = int(time.clock_getres(getattr(time, "CLOCK_REALTIME_COARSE", 0)) * 1e9)
_RACY_NS = max(2 * _COARSE_TICK_NS, 10_000_000)
_RACY_WHOLE_SECOND_NS = 2_000_000_000  # a file system that keeps whole seconds (or FAT's two)


def racy_change(path: Path, identity: dict[str, Any], opened_ns: int) -> str | None:
    """Why ``identity`` (taken at ``opened_ns``, time.time_ns) cannot tell the opened bytes
    from a write that followed in the same clock tick; None when it can."""
    ctime = identity["ctime_ns"]
    margin = _RACY_WHOLE_SECOND_NS if ctime % 1_000_000_000 == 0 else _RACY_NS
    if opened_ns - ctime < margin:
        return f"{path} was written just before it was opened (a later write could keep its ctime)"
    return None


def wait_until_settled(path: Path) -> None:
    """Return once a later write to ``path`` would change its ctime (``racy_change``), so that
    its file identity names its bytes: a clock tick or two after it was written (two seconds on
    a file system that keeps whole seconds)."""
    while racy_change(path, file_identity(path, os.stat(path)), time.time_ns()):
        time.sleep(0.005)
