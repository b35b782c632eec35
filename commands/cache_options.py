"""The compile cache's flags (`--cache-dir`, `--no-cache`, `--cache-max-gb`) and the cache
they open. Importing this module must not load OpenVINO (the parser is built before it loads)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.user_cache import COMPILED_CACHE_MAX_GB, cache_root

if TYPE_CHECKING:
    from compile_ahead.runtime.compile.cache.store import CompileCache


def add_cache_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="where compiled graphs are kept across runs, so no rung is compiled twice "
        "(default: $COMPILE_AHEAD_CACHE_DIR/compiled, else "
        "$XDG_CACHE_HOME/compile-ahead/compiled, else ~/.cache/compile-ahead/compiled)",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="compile every graph, reading and writing no compile cache",
    )
    p.add_argument(
        "--cache-max-gb",
        type=float,
        default=COMPILED_CACHE_MAX_GB,
        metavar="GB",
        help="compile cache size cap; least recently used entries are deleted beyond it "
        f"(default {COMPILED_CACHE_MAX_GB:g}; 0: no cap)",
    )


def default_cache_dir() -> Path:
    return cache_root() / "compiled"


def cache_from_flags(
    cache_dir: str | None = None,
    no_cache: bool = False,
    max_gb: float | None = COMPILED_CACHE_MAX_GB,
) -> CompileCache | None:
    """On by default in the user cache directory; ``--cache-dir`` moves it, ``--no-cache``
    turns it off, ``--cache-max-gb`` caps its size (least recently used entries go, also of
    earlier runs: the cap is enforced here, when the command opens the cache)."""
    from compile_ahead.runtime.compile.cache.store import CompileCache

    if no_cache:
        return None
    if max_gb is not None:
        check_max_gb(max_gb)
    max_bytes = None if max_gb is None or max_gb == 0 else int(max_gb * 1e9)
    directory = Path(cache_dir) if cache_dir else default_cache_dir()
    return CompileCache(directory, max_bytes=max_bytes, default_directory=not cache_dir).open()


def check_max_gb(max_gb: float) -> float:
    """A cap in GB: finite and >= 0 (0: no cap); NaN and infinity are refused."""
    if not (isinstance(max_gb, int | float) and 0 <= max_gb < float("inf")):
        raise CompileAheadError(
            f"--cache-max-gb must be a finite number of GB >= 0 (0: no cap), got {max_gb}"
        )
    return float(max_gb)
