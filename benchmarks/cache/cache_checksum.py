"""What verifying a whole compile cache entry costs, per checksum, next to importing it.

Every candidate reads all of each subject: files memory-mapped as the cache maps an entry, and
with --buffer-gb an in-memory buffer of random bytes (a ~1 GB rung entry's size). Candidates:
the cache's own (xxh3_128 per 64 MiB chunk, chunks on parallel threads), xxhash's xxh3_64,
xxh3_128 and xxh64, google-crc32c's hardware CRC-32C (it takes only bytes,
so a mapped file is copied into bytes first, and that copy is counted), zlib's crc32 and
adler32, hashlib's blake2b, sha1, sha256 and md5. Candidates are interleaved over the rounds
(timings on a shared machine drift) and the best and median of each are printed with their
throughput and their speed against zlib's crc32 (the ratios hold up under load better than
the seconds); the page cache is warm after the first pass, as it is for an entry written or
read recently. A candidate whose library is not installed is left out, and said so.

With --import-entry, the same entry is also imported (OpenVINO import_model on CPU) in the
same rounds, as a hit does it, split into its parts: mapping the file and reading its trailer,
the check, import_model; so the check's cost reads as a share of the import it guards.

    python benchmarks/cache/cache_checksum.py [FILE...] [--buffer-gb 1] [--rounds 5]
        [--import-entry ENTRY] [--json out.json]

The compile cache uses the fastest that releases the GIL and reads a mapping in place
(runtime/compile/cache/store.py, checksum). Whether a content digest of the weights is worth
memoizing on (inode, ctime) follows from the same figures: a digest reads the whole checkpoint
once per new identity, at the throughput printed here.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import orders
from _shared.results import write_result

Subject = bytes | np.ndarray  # bytes in memory, or a file mapped as the cache maps an entry


def _crc32c(subject: Subject) -> object:
    import google_crc32c

    data = subject if isinstance(subject, bytes) else bytes(memoryview(subject))
    return google_crc32c.value(data)


def _xxhash(name: str) -> Callable[[Subject], object]:
    def digest(subject: Subject) -> object:
        return getattr(importlib.import_module("xxhash"), name)(memoryview(subject))

    return digest


def _cache_checksum(subject: Subject) -> object:
    from compile_ahead.runtime.compile.cache.entry_format import checksum

    return checksum(np.frombuffer(subject, np.uint8) if isinstance(subject, bytes) else subject)


CANDIDATES: dict[str, tuple[str | None, Callable[[Subject], object]]] = {
    # the cache's own: xxh3_128 per 64 MiB chunk, the chunks on parallel threads
    "xxh3_128 chunked (cache)": ("xxhash", _cache_checksum),
    "xxh3_128": ("xxhash", _xxhash("xxh3_128_intdigest")),
    "xxh3_64": ("xxhash", _xxhash("xxh3_64_intdigest")),
    "xxh64": ("xxhash", _xxhash("xxh64_intdigest")),
    "crc32c": ("google_crc32c", _crc32c),
    "crc32": (None, lambda s: zlib.crc32(memoryview(s))),
    "adler32": (None, lambda s: zlib.adler32(memoryview(s))),
    "blake2b": (None, lambda s: hashlib.blake2b(memoryview(s), digest_size=16).digest()),
    "sha1": (None, lambda s: hashlib.sha1(memoryview(s)).digest()),
    "sha256": (None, lambda s: hashlib.sha256(memoryview(s)).digest()),
    "md5": (None, lambda s: hashlib.md5(memoryview(s)).digest()),
}


def available() -> dict[str, Callable[[Subject], object]]:
    found = {}
    for name, (module, fn) in CANDIDATES.items():
        try:
            if module is not None:
                importlib.import_module(module)
        except ImportError:
            print(f"({name} left out: {module} is not installed)")
            continue
        found[name] = fn
    return found


def import_parts(entry: Path) -> dict[str, float]:
    """One hit's import of a cache entry, by part, as runtime/compile/cache/store.py does it."""
    import openvino as ov

    from compile_ahead.runtime.base.ov_core import core
    from compile_ahead.runtime.compile.cache.entry_format import FOOTER, checksum

    t0 = time.perf_counter()
    mapped = np.memmap(entry, dtype=np.uint8, mode="c")
    trailer_len, _ = FOOTER.unpack(bytes(mapped[-FOOTER.size :]))
    blob = mapped[: len(mapped) - FOOTER.size - trailer_len]
    json.loads(bytes(mapped[len(blob) : len(blob) + trailer_len]))
    t1 = time.perf_counter()
    checksum(blob)
    t2 = time.perf_counter()
    compiled = core().import_model(ov.Tensor(blob, shared_memory=True), "CPU", {})
    t3 = time.perf_counter()
    del compiled
    return {"map_and_trailer_s": t1 - t0, "check_s": t2 - t1, "import_model_s": t3 - t2}


def measure(subjects: dict[str, Subject], rounds: int) -> dict[str, dict[str, list[float]]]:
    candidates = available()
    results: dict[str, dict[str, list[float]]] = {name: {} for name in subjects}
    for _, order in orders(list(candidates.items()), rounds):
        for label, subject in subjects.items():
            for name, fn in order:
                t0 = time.perf_counter()
                fn(subject)
                results[label].setdefault(name, []).append(time.perf_counter() - t0)
    return results


def report(label: str, size: int, times: dict[str, list[float]]) -> dict[str, object]:
    print(f"{label} ({size / 1e9:.3f} GB)")
    base = times.get("crc32")
    rows = {}
    for name, ts in sorted(times.items(), key=lambda kv: min(kv[1])):
        best, median = min(ts), statistics.median(ts)
        row = {"best_s": best, "median_s": median, "gb_per_s": size / best / 1e9}
        line = (
            f"  {name:8s} best {best:6.3f} s  median {median:6.3f} s  {size / best / 1e9:6.2f} GB/s"
        )
        if base:
            # Per round, zlib crc32's seconds over this candidate's: how many times faster.
            ratios = [b / t for b, t in zip(base, ts, strict=True)]
            row["x_crc32_median"] = statistics.median(ratios)
            spread = f"rounds {min(ratios):.2f}-{max(ratios):.2f}"
            line += f"  {statistics.median(ratios):5.2f}x crc32 ({spread})"
        rows[name] = row
        print(line)
    return {"bytes": size, "checksums": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--buffer-gb", type=float, default=0.0, help="also an in-memory buffer")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--import-entry", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not args.files and not args.buffer_gb:
        ap.error("give files to read, --buffer-gb, or both")

    subjects: dict[str, Subject] = {
        str(p): np.memmap(p, dtype=np.uint8, mode="r") for p in args.files
    }
    if args.buffer_gb:
        n = int(args.buffer_gb * 1e9)
        subjects["random buffer"] = np.random.default_rng(0).bytes(n)
    results = measure(subjects, args.rounds)
    out: dict[str, object] = {"rounds": args.rounds, "subjects": {}}
    for label, subject in subjects.items():
        out["subjects"][label] = report(label, len(subject), results[label])  # type: ignore[index]

    if args.import_entry is not None:
        parts = [import_parts(args.import_entry) for _ in range(args.rounds)]
        medians = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
        total = sum(medians.values())
        print(f"import of {args.import_entry} (median of {args.rounds}):")
        for k, v in medians.items():
            print(f"  {k:18s} {v:6.3f} s  {100 * v / total:5.1f}%")
        out["import_parts"] = parts
    if args.json is not None:
        write_result(args.json, "cache_checksum", out, args)


if __name__ == "__main__":
    main()
