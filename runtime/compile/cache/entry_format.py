"""A compile cache entry's bytes: the exported blob, then a JSON trailer (key, blob size, an
XXH3-128 hash of each chunk of the blob), then a magic footer; and the check a whole entry
passes before it is imported."""

from __future__ import annotations

import json
import os
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import xxhash

if TYPE_CHECKING:
    import numpy as np

MAGIC = b"CAHEAD01"
CHECKSUM = "xxh3_128_chunks"  # the trailer's field holding the blob's checksums
CHUNK_BYTES = 64 << 20  # chunks hashed in parallel; ~16 for a 1 GB rung entry
SUFFIX = ".ovblob"
FOOTER = struct.Struct("<Q8s")  # trailer length, magic


def checksum(blob: memoryview | np.ndarray) -> list[str]:
    """XXH3-128 (hex) of each CHUNK_BYTES of the blob: a damaged entry anywhere is found before
    it is imported. Not a defence against forgery (the cache directory is the user's own).
    xxhash reads each chunk in place with the GIL released, so the chunks are hashed on as
    many threads as the process may run on: a warm hit's check is over in a fraction of the
    time one thread takes (benchmarks/cache/cache_checksum.py)."""
    # An array's bytes through .data: numpy's stubs make ndarray a Buffer only from Python 3.12.
    view = (blob if isinstance(blob, memoryview) else blob.data).cast("B")
    chunks = [view[i : i + CHUNK_BYTES] for i in range(0, len(view), CHUNK_BYTES)] or [view]
    threads = min(len(chunks), len(os.sched_getaffinity(0)))
    if threads < 2:
        return [xxhash.xxh3_128_hexdigest(chunk) for chunk in chunks]
    with ThreadPoolExecutor(threads, thread_name_prefix="compile-ahead-checksum") as pool:
        return list(pool.map(xxhash.xxh3_128_hexdigest, chunks))


class CorruptEntry(Exception):
    """An entry that cannot be used: deleted and its graph compiled again."""


def tail(key: str, blob: memoryview) -> bytes:
    """What follows an entry's blob: its trailer and the footer."""
    trailer = json.dumps({"key": key, "blob_bytes": len(blob), CHECKSUM: checksum(blob)})
    return trailer.encode() + FOOTER.pack(len(trailer), MAGIC)


def checked_blob(mapped: np.ndarray, key: str) -> tuple[np.ndarray, float]:
    """The blob of a whole entry (mapped) whose trailer names ``key`` and whose checksums
    match, and the seconds the checksums took; CorruptEntry otherwise."""
    size = len(mapped)
    if size < FOOTER.size:
        raise CorruptEntry("truncated")
    trailer_len, magic = FOOTER.unpack(bytes(mapped[size - FOOTER.size :]))
    if magic != MAGIC or trailer_len > size - FOOTER.size:
        raise CorruptEntry("not an entry of this format")
    blob_len = size - FOOTER.size - trailer_len
    try:
        trailer = json.loads(bytes(mapped[blob_len : blob_len + trailer_len]))
    except ValueError:
        raise CorruptEntry("unreadable trailer") from None
    if not isinstance(trailer, dict):
        raise CorruptEntry("unreadable trailer")
    blob = mapped[:blob_len]
    if trailer.get("key") != key or trailer.get("blob_bytes") != blob_len:
        raise CorruptEntry("trailer does not match its name")
    t0 = time.perf_counter()
    if trailer.get(CHECKSUM) != checksum(blob):
        raise CorruptEntry("checksum mismatch: the entry is damaged")
    return blob, time.perf_counter() - t0


def is_prefix(name: str) -> bool:
    return len(name) == 2  # an entry's directory: the first two characters of its key


def is_entry(path: Path) -> bool:
    return path.name.endswith(SUFFIX) and not path.name.startswith(".")


def is_temporary(path: Path) -> bool:
    return path.name.startswith(".") and SUFFIX + "." in path.name  # dirs.PrivateFile
