"""A cache of compiled graphs across runs: export once, import instead of compiling again.

OpenVINO's own CACHE_DIR also works for our in-memory graphs (it hashes their content, so a
rebuilt graph hits), but it must build the graph and hash all of it, weights included, on
every compile_model call, hit or miss, and it says whether it hit only afterwards. Here an
entry is found from explicit identities before anything is built (benchmarks/cache/compile_cache.py
measures both), and it is keyed by everything a compiled graph depends on:

- the model: its config, and its weights' identity as the model source took it when it opened
  them (ModelSource.weights_identity: checkpoint or IR files' path, size, mtime, ctime, inode
  and device, synthetic checkpoints included; seed and dtype for synthetic weights drawn in
  memory). A user cannot set ctime or the inode back (mtime they can, with ``touch -r``), so a
  file rewritten or replaced is another identity. Weights that changed on disk since they were
  opened, or were written just before (within a ctime tick), are neither imported nor stored
  (ModelSource.weights_unsettled, asked at lookup and again before an entry is written);
- the graph: kind (decode, prefill, weight part i, attention core), capacity, chunk, buffer
  capacity, KV precision;
- the device (name and full device name, so a blob never moves to another CPU's ISA), the
  whole compile config (inference precision and every other property), the OpenVINO release
  and a digest of every module of the packages that shape a compiled graph (base, model,
  graphs, sources, compile).

An entry is one file: the exported blob followed by a JSON trailer (key, blob size, an XXH3-128
hash of each 64 MiB of the blob) and a magic footer. It is written under a temporary name and
renamed into place, so a reader sees a whole entry or none. Only this user's own entries in its
own directories are read or written, never through a symbolic link, and a root that other users
could change is not used at all (dirs.py says how; a shared root gets one directory per
user). A hit hashes the whole blob before importing it (its seconds are reported as verify_s
beside import_s): a truncated, damaged, foreign or unimportable entry is deleted and the graph
recompiled, with a warning. XXH3 was the fastest candidate measured side by side
(benchmarks/cache/cache_checksum.py: several times zlib's CRC-32, ahead of a hardware CRC-32C, which
moreover takes only bytes, so a mapped entry would be copied first); it reads the mapping in
place and releases the GIL, so a background import does not hold up decoding, and the chunks
are hashed on parallel threads. The check runs before the import rather than beside it:
OpenVINO's deserializer is no guard against damaged input, and a crash inside import_model
could not be discarded. A hit imports the blob from a memory map, as OpenVINO's own cache does
(no copy of the file into memory); the compiled model aliases the mapping, which is kept alive
with it.

A cache that cannot be used never fails a run: a directory that is a file, read-only, full or
not this user's own, an entry that cannot be removed or one larger than the cap each warn once
(one line) and the graph is compiled without the cache; every outcome says hit, miss (stored or
not, and why) or off. The size cap is enforced when a command opens the cache (``open``) and
after every store.

Weightless entries (CACHE_MODE=OPTIMIZE_SIZE, weights restored from the graph at import) are
optional and off: the CPU plugin leaves the weights out of our graphs (their constants hold
OpenVINO's mapping of the weights file), but OpenVINO 2026.4.1's CPU plugin cannot import such
an entry ("Attribute and shape size are inconsistent for Const op"), with MODEL_PTR or
WEIGHTS_PATH alike; a device or release whose weightless import works can turn them on.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from compile_ahead.errors import CompileAheadWarning
from compile_ahead.runtime.compile.cache.dirs import CacheTree, UntrustedEntry, UntrustedPath
from compile_ahead.runtime.compile.cache.entry_format import (
    SUFFIX,
    CorruptEntry,
    checked_blob,
    is_entry,
    is_prefix,
    is_temporary,
    tail,
)
from compile_ahead.runtime.compile.cache.entry_writes import GIVEN_UP, EntryGivenUp, EntryWrites
from compile_ahead.runtime.compile.cache.keys import entry_key, key_payload
from compile_ahead.runtime.compile.cache.outcome import OFF, CacheOutcome, Compiled, PendingStore

# numpy and openvino are imported where used: importing the cache loads neither.
if TYPE_CHECKING:
    import openvino as ov

    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.sources.base import ModelSource

STALE_TMP_S = 3600.0  # a temporary file this old belongs to a writer that died


class CompileCacheWarning(CompileAheadWarning):
    """The cache could not be used for a graph (compiled without it): an unusable entry, a
    directory that cannot be written, weights that changed on disk, an entry over the cap."""


class CompileCache:
    """Compiled graphs under ``directory``, keyed as the module docstring says."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        weightless: bool = False,
        max_bytes: int | None = None,
        default_directory: bool = False,
    ):
        self.directory = Path(directory).expanduser()
        # The default directory is the cache's own: one wider than 0700 is narrowed, while a
        # directory the user names keeps its mode (dirs.py).
        self._tree = CacheTree(self.directory, own_root=default_directory)
        self.weightless = weightless
        self.max_bytes = max_bytes  # least recently used entries go beyond this; None: no cap
        self.unusable: str | None = None  # set by ``open``: why no entry can be kept at all
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self.writes = EntryWrites()  # the entries being written, until end_writes

    def __repr__(self) -> str:
        return (
            f"CompileCache({str(self.directory)!r}, weightless={self.weightless}, "
            f"max_bytes={self.max_bytes})"
        )

    def warn_once(self, kind: str, message: str) -> None:
        """One warning line per kind of trouble per cache (not one per graph)."""
        with self._lock:
            if kind in self._warned:
                return
            self._warned.add(kind)
        warnings.warn(message, CompileCacheWarning, stacklevel=3)

    def open(self) -> CompileCache:
        """A command's start: find a directory that cannot hold entries (then every lookup is
        off, with a warning) and enforce the size cap, whatever this run will store."""
        if self._base_path() is not None:
            self.prune()
        return self

    def _base_path(self) -> Path | None:
        """Where this user's entries live (dirs.open_base), or None when the cache cannot
        be used at all: ``unusable`` says why, in one warning line."""
        if self.unusable is None:
            try:
                return self._tree.base_path()
            except UntrustedPath as err:
                self.unusable = f"the compile cache directory {err}"
            except NotADirectoryError:
                self.unusable = f"the compile cache directory {self.directory} is not a directory"
            except OSError as err:  # e.g. a parent that cannot be searched
                self.unusable = f"the compile cache directory {self.directory}: {_reason(err)}"
            self.warn_once("directory", f"{self.unusable}; compiling without the cache")
        return None

    def entries(self) -> list[Path]:
        return [p for p, _ in self._tree.files(is_prefix) if is_entry(p)]

    def prune(self, keep: Path | None = None) -> list[Path]:
        """Delete least recently used entries (a hit refreshes an entry's mtime) until the
        total is within max_bytes, and temporary files a killed writer left behind. An entry
        that cannot be deleted is a warning (once), never an error."""
        now = time.time()
        found = []
        for path, st in self._tree.files(is_prefix):
            if is_entry(path):
                found.append((st.st_mtime_ns, st.st_size, path))
            elif is_temporary(path) and now - st.st_mtime > STALE_TMP_S:
                with contextlib.suppress(OSError, UntrustedPath):
                    self._tree.remove(path)
        if self.max_bytes is None:
            return []
        total = sum(size for _, size, _ in found)
        removed: list[Path] = []
        failed: Exception | None = None
        for _, size, path in sorted(found):
            if total <= self.max_bytes:
                break
            if path == keep:
                continue
            try:
                self._tree.remove(path)
            except (OSError, UntrustedPath) as err:
                failed = err
                continue
            total -= size
            removed.append(path)
        if total > self.max_bytes:
            why = f" (cannot delete: {_reason(failed)})" if failed is not None else ""
            self.warn_once(
                "cap",
                f"compile cache {self.directory} holds {_size(total)}, over its cap of "
                f"{_size(self.max_bytes)} (--cache-max-gb){why}",
            )
        return removed

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
        from compile_ahead.runtime.compile.settings.options import device_config

        options = self.compile_options(options.resolved())
        config = device_config(options)
        base = self._base_path()
        if base is None:
            return None, CacheOutcome("off", note=self.unusable)
        payload = key_payload(source, graph, options.device, config, self.weightless)
        if payload is None:
            return None, CacheOutcome("off", note="the model's weights have no identity")
        if self.weightless and model_fn is None:
            return None, CacheOutcome("off", note="weightless entries need the uncompiled graph")
        unsettled = source.weights_unsettled()
        if unsettled is not None:
            self.warn_once("weights", f"compile cache not used: {unsettled}")
            return None, CacheOutcome("off", note=f"not cached: {unsettled}")
        key = entry_key(payload)
        path = base / key[:2] / (key + SUFFIX)
        miss = CacheOutcome("miss", entry=path, unsettled=source.weights_unsettled)
        try:
            fd = self._tree.open_entry(path)
        except UntrustedEntry as err:
            return None, self._discard(path, err.why, miss)
        except UntrustedPath as err:
            return None, self._untrusted(err)
        except OSError as err:  # e.g. a directory on the way that cannot be searched
            self.warn_once("read", f"cannot read the compile cache {self.directory}: {err}")
            return None, CacheOutcome("off", note=f"cannot read the cache: {_reason(err)}")
        if fd is None:
            return None, miss
        t0 = time.perf_counter()
        try:
            compiled, verify_s = self._import(fd, key, options.device, config, model_fn)
            with contextlib.suppress(OSError):
                os.utime(fd)  # recently used: the last to be pruned
        except CorruptEntry as err:
            return None, self._discard(path, str(err), miss)
        finally:
            os.close(fd)
        import_s = time.perf_counter() - t0
        return compiled, CacheOutcome("hit", import_s=import_s, entry=path, verify_s=verify_s)

    def _untrusted(self, err: UntrustedPath) -> CacheOutcome:
        """A directory on the way to an entry that is not this user's own: never read, never
        written; the graph is compiled without the cache."""
        self.warn_once("untrusted", f"compile cache not used: {err}")
        return CacheOutcome("off", note=f"not cached: {err}")

    def _discard(self, path: Path, problem: str, miss: CacheOutcome) -> CacheOutcome:
        """An unusable entry: deleted and recompiled; one that cannot be deleted is left alone
        (nothing is stored over it) and the graph compiled without the cache."""
        try:
            self._tree.remove(path)  # a directory cannot be: unlink says so
        except (OSError, UntrustedPath) as err:
            self.warn_once(
                "remove",
                f"compile cache entry {path} is unusable ({problem}) and cannot be removed "
                f"({_reason(err)}); compiling without the cache",
            )
            note = f"not stored: an unusable entry cannot be removed ({_reason(err)})"
            return CacheOutcome("miss", entry=None, note=note)
        self.warn_once(
            f"corrupt {path}",
            f"compile cache entry {path} is unusable ({problem}); compiling again",
        )
        return replace(miss, note=f"recompiled: {problem}")

    def compile_options(self, options: CompileOptions) -> CompileOptions:
        """The options a cached graph is compiled with (weightless adds the cache mode)."""
        if not self.weightless:
            return options
        extra = {**options.extra_config, "CACHE_MODE": "OPTIMIZE_SIZE"}
        return replace(options, extra_config=extra)

    def _import(
        self,
        fd: int,
        key: str,
        device: str,
        config: Mapping[str, object],
        model_fn: Callable[[], ov.Model] | None,
    ) -> tuple[ov.CompiledModel, float]:
        """The compiled model of the entry open on ``fd``, and the seconds its checksum took."""
        import numpy as np
        import openvino as ov

        from compile_ahead.runtime.base.ov_core import core

        try:
            with open(fd, "rb", closefd=False) as f:
                mapped = np.memmap(f, dtype=np.uint8, mode="c")  # private: never writes the file
        except (OSError, ValueError) as err:
            raise CorruptEntry(f"cannot map it: {_reason(err)}") from None
        blob, verify_s = checked_blob(mapped, key)
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
        compiled._compile_ahead_blob = mapped
        return compiled, verify_s

    def store(self, outcome: CacheOutcome, compiled: Compiled) -> CacheOutcome:
        """Write the entry of a miss: the compile's export when it made one (a compile
        worker's), else the compiled model exported now; a failed write is a warning, never
        an error."""
        if compiled.blob is not None:
            return self.store_blob(outcome, compiled.blob)
        if outcome.state != "miss" or outcome.entry is None:
            return outcome
        refused = self.writes.admit(outcome.entry)  # counted from the export on
        if refused is not None:
            return replace(outcome, entry=None, note=refused)
        try:
            t0 = time.perf_counter()
            try:
                buffer = io.BytesIO()
                compiled.model.export_model(buffer)
            except RuntimeError as err:
                return self._not_stored(outcome, err)
            return self._write(outcome, outcome.entry, buffer.getbuffer(), t0)
        finally:
            self.writes.release()

    def begin_writes(self, delay_s: float = 0.0) -> None:
        """A run's start: entries may be written (again, after an earlier run's end_writes).
        ``delay_s`` (fault injection, --inject-store-delay): every entry write pauses this long
        with its temporary file open, as writing a large entry does."""
        self.writes.begin(delay_s)

    def end_writes(self) -> None:
        """A run's end: write none until the next run begins, and wait for the entries being
        written (a compile the run abandoned, a one-ahead successor still compiling when it
        ends, may have started one); see entry_writes.py for an interrupted command."""
        self.writes.end()

    def store_blob(
        self, outcome: CacheOutcome, blob: bytes | memoryview, t0: float | None = None
    ) -> CacheOutcome:
        """Write an already exported blob (e.g. one a compile worker sent) as a miss's entry,
        unless the weights changed since the lookup (then the blob may hold other bytes than
        its key names) or the command has ended (end_writes)."""
        if outcome.state != "miss" or outcome.entry is None:
            return outcome
        refused = self.writes.admit(outcome.entry)
        if refused is not None:
            return replace(outcome, entry=None, note=refused)
        try:
            return self._write(outcome, outcome.entry, blob, t0)
        finally:
            self.writes.release()

    def _write(
        self, outcome: CacheOutcome, path: Path, blob: bytes | memoryview, t0: float | None
    ) -> CacheOutcome:
        t0 = time.perf_counter() if t0 is None else t0
        key = path.name.removesuffix(SUFFIX)
        view = memoryview(blob).cast("B")
        if self.max_bytes is not None and len(view) > self.max_bytes:
            self.warn_once(
                "too large",
                f"a compiled graph of {_size(len(view))} exceeds the compile cache's cap of "
                f"{_size(self.max_bytes)} (--cache-max-gb): not stored",
            )
            note = (
                f"not stored: {_size(len(view))} exceed the cache's cap of {_size(self.max_bytes)}"
            )
            return replace(outcome, entry=None, note=note)
        entry_tail = tail(key, view)
        try:
            # No fsync: a crash can leave a short or zeroed file under the final name only
            # after a rename, and the checksum rejects it (then it is recompiled).
            with self.writes.new_file(lambda: self._tree.new_file(path)) as entry:
                self.writes.write_blob(entry.file, view)
                entry.file.write(entry_tail)
                # Last: the export read the weights, so they must still be what the key says.
                changed = outcome.unsettled() if outcome.unsettled is not None else None
                if changed is not None:
                    self.warn_once("weights", f"compile cache not used: {changed}")
                    return replace(outcome, entry=None, note=f"not stored: {changed}")
                self.writes.publish(entry)
        except UntrustedPath as err:
            self.warn_once("untrusted", f"compile cache not used: {err}")
            return replace(outcome, entry=None, note=f"not stored: {err}")
        except OSError as err:
            return self._not_stored(outcome, err)
        except EntryGivenUp:
            return replace(outcome, entry=None, note=GIVEN_UP)
        stored = replace(outcome, store_s=time.perf_counter() - t0, stored=True)
        self.prune(keep=path)
        return stored

    def _not_stored(self, outcome: CacheOutcome, err: BaseException) -> CacheOutcome:
        self.warn_once(
            "write",
            f"could not write compile cache entry {outcome.entry}: {_reason(err)}; compiling "
            "without storing",
        )
        return replace(outcome, entry=None, note=f"not stored: {_reason(err)}")


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def _reason(err: BaseException | None) -> str:
    """An error as one short clause (an OS error's strerror, not its repr with the path)."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def cached_compile(
    compile_cache: CompileCache | None,
    source: ModelSource,
    graph: Mapping[str, object],
    options: CompileOptions,
    compile_fn: Callable[[CompileOptions], Compiled],
    model_fn: Callable[[], ov.Model] | None = None,
    store_later: bool = False,
) -> tuple[Compiled, CacheOutcome, PendingStore | None]:
    """The one way a graph goes through the compile cache: imported from its entry, or
    compiled with ``compile_fn`` and stored; ``compile_cache`` None compiles with the cache
    off. ``store_later``: a miss's entry is not written now but by the returned pending store
    (exporting and writing take seconds), e.g. once the graph has served the first token."""
    if compile_cache is None:
        return compile_fn(options), OFF, None
    model, outcome = compile_cache.lookup(source, graph, options, model_fn)
    if model is not None:
        return Compiled(model), outcome, None
    if outcome.state == "off":
        return compile_fn(options), outcome, None
    compiled = compile_fn(compile_cache.compile_options(options))
    pending = functools.partial(compile_cache.store, outcome, compiled)
    if store_later:
        return compiled, outcome, pending
    return compiled, pending(), None
