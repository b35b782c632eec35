"""The per-user cache directory: synthetic checkpoints and compiled rungs live under it."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "COMPILE_AHEAD_CACHE_DIR"
# Default size cap of the compile cache (compiled/): a whole-graph entry holds its compiled
# weights (a 7B model's rung is ~15 GB), so the cache is capped unless told otherwise.
COMPILED_CACHE_MAX_GB = 40.0


def cache_root() -> Path:
    """$COMPILE_AHEAD_CACHE_DIR, else $XDG_CACHE_HOME/compile-ahead, else ~/.cache/compile-ahead."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "compile-ahead"
