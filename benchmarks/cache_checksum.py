"""What verifying a whole compile cache entry costs, per checksum, next to importing it.

For each file (a compile cache entry, a weights file), memory-mapped as the cache maps an
entry, every candidate reads all of it: zlib's crc32 and adler32, hashlib's blake2b, sha1,
sha256 and md5. Candidates are interleaved over the rounds (timings on a shared machine drift)
and the best and median of each are printed with their throughput; the page cache is warm
after the first pass, as it is for an entry written or read recently.

With --import-entry, the same entry is also imported (OpenVINO import_model on CPU) in the
same rounds, so the checksum's cost reads as a fraction of the import it guards.

    python benchmarks/cache_checksum.py FILE... [--rounds 3] [--import-entry ENTRY]
        [--json out.json]

The compile cache uses the fastest (runtime/compile/cache.py, checksum). Whether a content
digest of the weights is worth memoizing on (inode, ctime) follows from the same figures: a
digest reads the whole checkpoint once per new identity, at the throughput printed here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

CANDIDATES: dict[str, Callable[[memoryview], object]] = {
    "crc32": zlib.crc32,
    "adler32": zlib.adler32,
    "blake2b": lambda v: hashlib.blake2b(v, digest_size=16).digest(),
    "sha1": lambda v: hashlib.sha1(v).digest(),
    "sha256": lambda v: hashlib.sha256(v).digest(),
    "md5": lambda v: hashlib.md5(v).digest(),
}


def _import_seconds(entry: Path) -> float:
    """One import of a cache entry's blob, as a hit does it (trailer and footer stripped)."""
    import openvino as ov

    from compile_ahead.runtime.base.ov_core import core
    from compile_ahead.runtime.compile.cache import _FOOTER

    mapped = np.memmap(entry, dtype=np.uint8, mode="c")
    trailer_len, _ = _FOOTER.unpack(bytes(mapped[-_FOOTER.size :]))
    blob = mapped[: len(mapped) - _FOOTER.size - trailer_len]
    trailer = json.loads(bytes(mapped[len(blob) : len(blob) + trailer_len]))
    del trailer
    t0 = time.perf_counter()
    compiled = core().import_model(ov.Tensor(blob, shared_memory=True), "CPU", {})
    seconds = time.perf_counter() - t0
    del compiled
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--import-entry", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    results: dict[str, dict[str, list[float]]] = {str(f): {} for f in args.files}
    imports: list[float] = []
    for _ in range(args.rounds):
        for path in args.files:
            view = memoryview(np.memmap(path, dtype=np.uint8, mode="r"))
            for name, fn in CANDIDATES.items():
                t0 = time.perf_counter()
                fn(view)
                results[str(path)].setdefault(name, []).append(time.perf_counter() - t0)
        if args.import_entry is not None:
            imports.append(_import_seconds(args.import_entry))

    out: dict[str, object] = {"rounds": args.rounds, "files": {}}
    for path in args.files:
        size = path.stat().st_size
        print(f"{path} ({size / 1e9:.3f} GB)")
        rows = {}
        for name, times in sorted(results[str(path)].items(), key=lambda kv: min(kv[1])):
            best, median = min(times), statistics.median(times)
            rows[name] = {"best_s": best, "median_s": median, "gb_per_s": size / best / 1e9}
            rate = size / best / 1e9
            print(f"  {name:8s} best {best:6.3f} s  median {median:6.3f} s  {rate:5.2f} GB/s")
        out["files"][str(path)] = {"bytes": size, "checksums": rows}  # type: ignore[index]
    if imports:
        print(
            f"import_model of {args.import_entry}: best {min(imports):.3f} s, median "
            f"{statistics.median(imports):.3f} s"
        )
        out["import_s"] = imports
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
