"""A cache of compiled graphs across runs: export once, import instead of compiling again.

OpenVINO's own CACHE_DIR also works for our in-memory graphs (it hashes their content, so a
rebuilt graph hits), but it must build the graph and hash all of it, weights included, on
every compile_model call, hit or miss, and it says whether it hit only afterwards. Here an
entry is found from explicit identities before anything is built (benchmarks/compile_cache.py
measures both), and it is keyed by everything a compiled graph depends on:

- the model: its config, and its weights' identity as the model source took it when it opened
  them (ModelSource.weights_identity: checkpoint or IR files' path, size, mtime, ctime and
  inode; preset, seed, dtype and generator version for synthetic weights);
- the graph: kind (decode, prefill, weight part i, attention core), capacity, chunk, buffer
  capacity, KV precision;
- the device (name and full device name, so a blob never moves to another CPU's ISA), the
  whole compile config (inference precision and every other property), the OpenVINO release
  and a digest of every module of the packages that shape a compiled graph (base, model,
  graphs, sources, compile).

An entry is one file: the exported blob followed by a JSON trailer (key, blob size, a sampled
digest) and a magic footer. It is written under a temporary name and renamed into place, so a
reader sees a whole entry or none; a truncated, foreign or unimportable entry is deleted and
the graph recompiled, with a warning. A hit imports the blob from a memory map (no copy of the
file into memory); the compiled model may alias the mapping, which is kept alive with it.

Weightless entries (CACHE_MODE=OPTIMIZE_SIZE, weights restored from the graph at import) are
optional: the CPU plugin leaves weights out only for graphs read from IR files, so for our
in-memory graphs its entries are as large as full ones; a device that supports weightless
blobs for in-memory graphs can turn them on.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import struct
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from compile_ahead.runtime.base.user_cache import cache_root

# numpy and openvino are imported where used, so the command-line helpers at the bottom can be
# imported while building a parser without loading OpenVINO.
if TYPE_CHECKING:
    import numpy as np
    import openvino as ov

    from compile_ahead.runtime.compile.options import CompileOptions
    from compile_ahead.runtime.graphs.decoder import GraphSpec
    from compile_ahead.runtime.sources.base import ModelSource

FORMAT_VERSION = 1
MAGIC = b"CAHEAD01"
SUFFIX = ".ovblob"
_FOOTER = struct.Struct("<Q8s")  # trailer length, magic
_SAMPLE_PAGES = 64
_SAMPLE_BYTES = 4096
# Packages whose modules shape a compiled graph (how weights are read, how graphs are built
# or cut, how they are compiled): an edit to any of their modules changes every key.
_GRAPH_PACKAGES = ("base", "model", "graphs", "sources", "compile")

CacheState = Literal["hit", "miss", "off"]
# A whole-graph entry holds the compiled weights (a 7B model's rung is ~15 GB): cap by default.
DEFAULT_MAX_GB = 40.0
STALE_TMP_S = 3600.0  # a temporary file this old belongs to a writer that died


class CompileCacheWarning(UserWarning):
    """A cache entry was unusable (recompiled) or could not be written (compiled anyway)."""


@dataclass(frozen=True)
class CacheOutcome:
    state: CacheState  # hit: imported; miss: compiled (and stored); off: no cache used
    import_s: float = 0.0  # reading and importing the entry (hit)
    store_s: float = 0.0  # exporting and writing the entry (miss)
    entry: Path | None = None
    note: str | None = None  # why the cache was off, or what went wrong with the entry

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cache": self.state,
            "import_s": round(self.import_s, 3),
            "store_s": round(self.store_s, 3),
        }
        if self.note:
            out["cache_note"] = self.note
        return out


OFF = CacheOutcome("off")


@functools.cache
def _code_digest() -> str:
    return code_digest(Path(__file__).resolve().parents[1])


def code_digest(runtime_dir: Path) -> str:
    """A digest of every module of the graph-shaping packages under ``runtime_dir``, taken from
    the package itself (never a hand-kept list, which would miss new or moved modules)."""
    h = hashlib.sha256()
    for package in _GRAPH_PACKAGES:
        for path in sorted((runtime_dir / package).rglob("*.py")):
            rel = path.relative_to(runtime_dir).as_posix()
            h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _openvino_version() -> str:
    import openvino

    return openvino.get_version()


@functools.cache
def _device_name(device: str) -> str:
    from compile_ahead.runtime.base.ov_core import core

    try:
        return str(core().get_property(device, "FULL_DEVICE_NAME"))
    except RuntimeError:
        return device


def _config_repr(config: Mapping[str, object]) -> dict[str, str]:
    return {str(k): str(v) for k, v in sorted(config.items()) if k != "MODEL_PTR"}


def _sample_digest(blob: memoryview | np.ndarray) -> str:
    """A digest of the size, both ends and evenly spaced pages: catches truncation and foreign
    or overwritten files without reading a whole multi-GB blob on every import."""
    data = memoryview(blob).cast("B")
    n = len(data)
    h = hashlib.blake2b(str(n).encode(), digest_size=16)
    h.update(data[: 1 << 20])
    h.update(data[max(0, n - (1 << 20)) :])
    for i in range(_SAMPLE_PAGES):
        at = (n * i) // _SAMPLE_PAGES
        h.update(data[at : at + _SAMPLE_BYTES])
    return h.hexdigest()


class CorruptEntry(Exception):
    pass


class CompileCache:
    """Compiled graphs under ``directory``, keyed as the module docstring says."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        weightless: bool = False,
        max_bytes: int | None = None,
    ):
        self.directory = Path(directory).expanduser()
        self.weightless = weightless
        self.max_bytes = max_bytes  # least recently used entries go beyond this; None: no cap

    def __repr__(self) -> str:
        return (
            f"CompileCache({str(self.directory)!r}, weightless={self.weightless}, "
            f"max_bytes={self.max_bytes})"
        )

    def entries(self) -> list[Path]:
        return sorted(self.directory.glob(f"??/*{SUFFIX}"))

    def prune(self, keep: Path | None = None) -> list[Path]:
        """Delete least recently used entries (a hit refreshes an entry's mtime) until the
        total is within max_bytes, and temporary files a killed writer left behind."""
        now = time.time()
        for tmp in self.directory.glob(f"??/.*{SUFFIX}.*"):
            with contextlib.suppress(OSError):
                if now - tmp.stat().st_mtime > STALE_TMP_S:
                    tmp.unlink()
        if self.max_bytes is None:
            return []
        found = []
        for path in self.entries():
            with contextlib.suppress(FileNotFoundError):
                st = path.stat()
                found.append((st.st_mtime_ns, st.st_size, path))
        total = sum(size for _, size, _ in found)
        removed = []
        for _, size, path in sorted(found):
            if total <= self.max_bytes:
                break
            if path != keep:
                path.unlink(missing_ok=True)
                total -= size
                removed.append(path)
        return removed

    # -- keys ---------------------------------------------------------------------------
    def key_payload(
        self,
        source: ModelSource,
        graph: Mapping[str, object],
        device: str,
        config: Mapping[str, object],
    ) -> dict[str, Any] | None:
        weights = source.weights_identity()
        if weights is None:
            return None
        return {
            "format": FORMAT_VERSION,
            "openvino": _openvino_version(),
            "code": _code_digest(),
            "device": device,
            "device_name": _device_name(device),
            "config": _config_repr(config),
            "weightless": self.weightless,
            "graph": dict(graph),
            "model": {"config": asdict(source.config), "weights": weights},
        }

    def entry_path(self, key: str) -> Path:
        return self.directory / key[:2] / (key + SUFFIX)

    # -- the compile -------------------------------------------------------------------
    def lookup(
        self,
        source: ModelSource,
        graph: Mapping[str, object],
        options: CompileOptions,
        model_fn: Callable[[], ov.Model] | None = None,
    ) -> tuple[ov.CompiledModel | None, CacheOutcome]:
        """The graph imported from its entry (a hit), or None and a miss (or off) outcome to
        pass to ``store`` once the caller has compiled with ``compile_options(options)``.

        ``model_fn`` builds the uncompiled graph; weightless entries need it at import.
        """
        from compile_ahead.runtime.compile.options import device_config

        options = self.compile_options(options.resolved())
        config = device_config(options)
        payload = self.key_payload(source, graph, options.device, config)
        if payload is None:
            return None, CacheOutcome("off", note="the model's weights have no identity")
        if self.weightless and model_fn is None:
            return None, CacheOutcome("off", note="weightless entries need the uncompiled graph")
        key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        path = self.entry_path(key)
        if not path.exists():
            return None, CacheOutcome("miss", entry=path)
        t0 = time.perf_counter()
        try:
            compiled = self._import(path, key, options.device, config, model_fn)
        except CorruptEntry as err:
            warnings.warn(
                f"compile cache entry {path} is unusable ({err}); compiling again",
                CompileCacheWarning,
                stacklevel=3,
            )
            path.unlink(missing_ok=True)
            return None, CacheOutcome("miss", entry=path, note=f"recompiled: {err}")
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: the last to be pruned
        return compiled, CacheOutcome("hit", import_s=time.perf_counter() - t0, entry=path)

    def compile_options(self, options: CompileOptions) -> CompileOptions:
        """The options a cached graph is compiled with (weightless adds the cache mode)."""
        if not self.weightless:
            return options
        from dataclasses import replace

        extra = {**options.extra_config, "CACHE_MODE": "OPTIMIZE_SIZE"}
        return replace(options, extra_config=extra)

    def _import(
        self,
        path: Path,
        key: str,
        device: str,
        config: Mapping[str, object],
        model_fn: Callable[[], ov.Model] | None,
    ) -> ov.CompiledModel:
        import numpy as np
        import openvino as ov

        from compile_ahead.runtime.base.ov_core import core

        try:
            mapped = np.memmap(path, dtype=np.uint8, mode="c")  # private: never writes the file
        except (OSError, ValueError) as err:
            raise CorruptEntry(f"cannot map it: {err}") from None
        size = len(mapped)
        if size < _FOOTER.size:
            raise CorruptEntry("truncated")
        trailer_len, magic = _FOOTER.unpack(bytes(mapped[size - _FOOTER.size :]))
        if magic != MAGIC or trailer_len > size - _FOOTER.size:
            raise CorruptEntry("not an entry of this format")
        blob_len = size - _FOOTER.size - trailer_len
        try:
            trailer = json.loads(bytes(mapped[blob_len : blob_len + trailer_len]))
        except ValueError:
            raise CorruptEntry("unreadable trailer") from None
        blob = mapped[:blob_len]
        if trailer.get("key") != key or trailer.get("blob_bytes") != blob_len:
            raise CorruptEntry("trailer does not match its name")
        if trailer.get("sample") != _sample_digest(blob):
            raise CorruptEntry("content digest mismatch")
        import_config = dict(config)
        if self.weightless:
            if model_fn is None:
                raise CorruptEntry("a weightless entry needs the graph to restore weights")
            import_config["MODEL_PTR"] = model_fn()
        try:
            compiled = core().import_model(
                ov.Tensor(blob, shared_memory=True), device, import_config
            )
        except RuntimeError as err:
            from compile_ahead.runtime.base.ov_core import openvino_error_summary

            raise CorruptEntry(f"import failed: {openvino_error_summary(err)}") from None
        # The compiled model may alias the mapped blob: keep the mapping as long as it lives.
        compiled._compile_ahead_blob = mapped  # type: ignore[attr-defined]
        return compiled

    def store(self, outcome: CacheOutcome, compiled: ov.CompiledModel) -> CacheOutcome:
        """Export and write the entry of a miss; a failed write is a warning, never an error."""
        if outcome.state != "miss" or outcome.entry is None:
            return outcome
        t0 = time.perf_counter()
        try:
            buffer = io.BytesIO()
            compiled.export_model(buffer)
        except RuntimeError as err:
            return self._not_stored(outcome.entry, err)
        return self.store_blob(outcome, buffer.getbuffer(), t0)

    def store_blob(
        self, outcome: CacheOutcome, blob: bytes | memoryview, t0: float | None = None
    ) -> CacheOutcome:
        """Write an already exported blob (e.g. one a compile worker sent) as a miss's entry."""
        if outcome.state != "miss" or outcome.entry is None:
            return outcome
        t0 = time.perf_counter() if t0 is None else t0
        path = outcome.entry
        key = path.name.removesuffix(SUFFIX)
        view = memoryview(blob).cast("B")
        if self.max_bytes is not None and len(view) > self.max_bytes:
            note = f"not stored: {len(view)} bytes exceed the cache's {self.max_bytes}"
            return CacheOutcome("miss", entry=None, note=note)
        trailer = json.dumps(
            {"key": key, "blob_bytes": len(view), "sample": _sample_digest(view)}
        ).encode()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            try:
                # No fsync: a crash can leave a short or zeroed file under the final name only
                # after a rename, and the trailer check rejects it (then it is recompiled).
                with os.fdopen(fd, "wb") as f:
                    f.write(view)
                    f.write(trailer)
                    f.write(_FOOTER.pack(len(trailer), MAGIC))
                os.chmod(tmp, 0o644)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as err:
            return self._not_stored(path, err)
        stored = CacheOutcome("miss", store_s=time.perf_counter() - t0, entry=path)
        with contextlib.suppress(OSError):
            self.prune(keep=path)
        return stored

    @staticmethod
    def _not_stored(path: Path, err: BaseException) -> CacheOutcome:
        warnings.warn(
            f"could not write compile cache entry {path}: {err}",
            CompileCacheWarning,
            stacklevel=4,
        )
        return CacheOutcome("miss", entry=None, note=f"not stored: {err}")


if TYPE_CHECKING:
    Compiled = tuple[ov.CompiledModel, float, float]  # compiled model, build s, compile s


def cached_compile(
    compile_cache: CompileCache | None,
    source: ModelSource,
    graph: Mapping[str, object],
    options: CompileOptions,
    compile_fn: Callable[[CompileOptions], Compiled],
    model_fn: Callable[[], ov.Model] | None = None,
    store: bool = True,
) -> tuple[Compiled, CacheOutcome]:
    """Import the graph from the cache (build and compile seconds 0), or compile it with
    ``compile_fn`` and store it (``store`` False: the caller stores the miss later with
    ``compile_cache.store``); ``compile_cache`` None compiles with the cache off."""
    if compile_cache is None:
        return compile_fn(options), OFF
    compiled, outcome = compile_cache.lookup(source, graph, options, model_fn)
    if compiled is not None:
        return (compiled, 0.0, 0.0), outcome
    if outcome.state == "off":
        return compile_fn(options), outcome
    result = compile_fn(compile_cache.compile_options(options))
    if not store:
        return result, outcome
    return result, compile_cache.store(outcome, result[0])


def step_graph_identity(spec: GraphSpec) -> dict[str, object]:
    """A whole decode or prefill graph: every field of its spec (capacity, chunk, KV
    precision, buffer capacity, and any added later)."""
    return {"graph": spec.kind, **asdict(spec)}


def weight_part_identity(index: int, kv_precision: str) -> dict[str, object]:
    return {"graph": "weight-part", "index": index, "kv_precision": kv_precision}


def attention_core_identity(spec: GraphSpec) -> dict[str, object]:
    return {"graph": "attention", **asdict(spec)}


# -- the command-line side ----------------------------------------------------------------
def default_cache_dir() -> Path:
    return cache_root() / "compiled"


def cache_from_flags(
    cache_dir: str | None = None,
    no_cache: bool = False,
    max_gb: float | None = DEFAULT_MAX_GB,
) -> CompileCache | None:
    """On by default in the user cache directory; ``--cache-dir`` moves it, ``--no-cache``
    turns it off, ``--cache-max-gb`` caps its size (least recently used entries go)."""
    if no_cache:
        return None
    max_bytes = None if max_gb is None or max_gb <= 0 else int(max_gb * 1e9)
    return CompileCache(Path(cache_dir) if cache_dir else default_cache_dir(), max_bytes=max_bytes)
