"""What the compile cache did for a graph (hit, miss or off, with its times), and a compiled
graph with what it took."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import openvino as ov

CacheState = Literal["hit", "miss", "off"]


@dataclass(frozen=True)
class CacheOutcome:
    state: CacheState  # hit: imported; miss: compiled (stored or not); off: no cache used
    import_s: float = 0.0  # reading, verifying and importing the entry (hit)
    store_s: float = 0.0  # exporting and writing the entry (miss)
    entry: Path | None = None  # a miss's entry to write; None once nothing is to be stored
    note: str | None = None  # why the cache was off, why not stored, or what was wrong
    stored: bool = False  # a miss whose entry was written
    verify_s: float = 0.0  # the whole entry's checksum (hit), part of import_s
    # Asked again before an entry is written: why the weights may have changed since the lookup.
    unsettled: Callable[[], str | None] | None = field(default=None, compare=False, repr=False)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cache": self.state,
            "import_s": round(self.import_s, 3),
            "store_s": round(self.store_s, 3),
        }
        if self.state == "hit":
            out["verify_s"] = round(self.verify_s, 3)
        if self.state == "miss":
            out["cache_stored"] = self.stored
        if self.note:
            out["cache_note"] = self.note
        return out

    def summary(self) -> str:
        """A few words for a console line: hit, miss (stored or why not) or off (why)."""
        if self.state == "hit":
            return f"hit (import {self.import_s:.2f} s, checksum {self.verify_s:.2f} s)"
        if self.state == "miss":
            if self.stored:
                return f"miss, stored ({self.note})" if self.note else "miss, stored"
            return f"miss, {self.note or 'not stored'}"
        return f"off ({self.note})" if self.note else "off"


OFF = CacheOutcome("off")


@dataclass
class Compiled:
    """A compiled graph and what it took (build and compile seconds, 0 on an import)."""

    model: ov.CompiledModel
    build_s: float = 0.0
    compile_s: float = 0.0
    # Its export, when the compile made one (a compile worker's): a cache entry is written
    # from it instead of exporting the model again.
    blob: bytes | None = None


# Writes a miss's entry when the caller has time; what the cache did.
PendingStore = Callable[[], CacheOutcome]
