"""KV memory for the static graphs, and the three ways the ladder holds it.

Every buffer is per layer K and V of shape [B, kv_heads, capacity, head_dim] (head-major; B
sequences of a batch, each with its own filled length), carved page-aligned out of one
anonymous mmap. Pages of an anonymous mapping are committed only
when written, so "reserved" (the allocation size: what a device driver would pin) and
"committed" (pages backing written slots) are both exact, and reported separately:

- TopCapacityKV (b0, b1 "shared-max"; i3 "reserve-commit"): one allocation at the top capacity
  from the start; rung graphs read a prefix of it, so a boundary copies nothing.
- GrowingKV (i1, i2 "copy-grow"): an allocation at the active rung's capacity; a boundary
  allocates the next capacity, copies the live slots and frees the old allocation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.ladder.settings.schedules import KVPolicy
from compile_ahead.runtime.model.architecture import ModelConfig
from compile_ahead.runtime.model.kv_arena import Bindable, KVArena

if TYPE_CHECKING:
    from compile_ahead.runtime.graphs.step import StepOutput


@dataclass(frozen=True)
class Migration:
    bytes_copied: int
    peak_reserved_bytes: int = 0  # old and new allocations coexisting during the copy
    allocation_s: float = 0.0  # making the new allocation
    copy_s: float = 0.0  # copying the live slots into it


class KVStore:
    """One KV policy's memory: it owns the buffers, the filled length, and which buffer a rung
    graph reads (its own, or a prefix of a larger one)."""

    kind: str
    # Whether rung graphs below the top read a prefix of a larger buffer (built with
    # GraphSpec.buffer_capacity) rather than a buffer of their own capacity.
    shared_buffer: bool

    def __init__(self, cfg: ModelConfig, ladder: tuple[int, ...], precision: str, batch: int = 1):
        self.cfg = cfg
        self.ladder = ladder
        self.precision = precision
        self.batch = batch
        # KV slots written per sequence: append_rows() and a sequence's append() move them.
        self.lengths = np.zeros(batch, np.int64)

    @property
    def length(self) -> int:
        """The longest sequence's filled slots: what a rung must hold."""
        return int(self.lengths.max())

    @property
    def arena(self) -> KVArena:
        raise NotImplementedError

    def reserved_bytes(self) -> int:
        raise NotImplementedError

    def committed_bytes(self) -> int:
        return self.arena.committed_bytes([int(n) for n in self.lengths])

    def buffer_capacity(self, capacity: int) -> int | None:
        """Slots of the buffer a rung of ``capacity`` reads, when larger than the rung."""
        return None

    def grow_to(self, capacity: int) -> Migration:
        """Make the store hold ``capacity`` slots (called at a boundary)."""
        raise NotImplementedError

    def append_rows(self, out: StepOutput, live: np.ndarray) -> None:
        """Store a batched step's new K/V row of each live sequence after its own filled
        slots (a stopped sequence's row is dropped: its slot stays masked)."""
        rows = np.flatnonzero(live)
        slots = self.lengths[rows]
        if len(rows) and int(slots.max()) >= self.arena.capacity:
            raise CompileAheadError(
                f"KV store full: slot {int(slots.max())} exceeds capacity {self.arena.capacity}"
            )
        for layer, (k, v) in enumerate(zip(out.new_keys, out.new_values, strict=True)):
            self.arena.write_rows(layer, rows, slots, k, v)
        self.lengths[rows] += 1

    def sequence(self, index: int) -> SequenceKV:
        """Sequence ``index`` of the batch as a one-sequence store: where a batch-1 prefill
        graph writes that sequence's prompt."""
        return SequenceKV(self, index)

    def on_compiled(self, step: Bindable) -> None:
        """A rung graph was compiled: a shared buffer binds it now, off the critical path."""
        if self.shared_buffer:
            step.bind(self.arena)

    def take_into_use(self, step: Bindable) -> None:
        """A rung graph becomes the active one: bind it to the live buffer if not bound yet,
        then free what a boundary left behind (no request reads it any more)."""
        if step.bound is not self.arena:
            step.bind(self.arena)
        self.release_retired()

    def release_retired(self) -> None:
        """Free memory a boundary left behind, once no request is bound to it."""


class SequenceKV:
    """One sequence of a store (B = 1 included), as a prefill graph sees it: its own filled
    length, and appending after it into its row of the live buffer (``arena``, views of the
    store's memory: valid until the store grows). Pages are committed as its rows are
    written, as for any store."""

    def __init__(self, store: KVStore, index: int):
        self.store = store
        self.index = index
        self.arena = store.arena.row(index)

    @property
    def length(self) -> int:
        return int(self.store.lengths[self.index])

    def append(self, out: StepOutput, n: int) -> None:
        """Store a batch-1 step's first n new K/V rows after this sequence's filled slots."""
        start = self.length
        if start + n > self.arena.capacity:
            raise CompileAheadError(
                f"KV store full: sequence {self.index}'s {start} + {n} slots exceed capacity "
                f"{self.arena.capacity}"
            )
        for layer, (k, v) in enumerate(zip(out.new_keys, out.new_values, strict=True)):
            self.arena.write(layer, start, k[:, :, :n], v[:, :, :n])
        self.store.lengths[self.index] += n


class TopCapacityKV(KVStore):
    """One allocation at the top capacity from the start; every rung reads a prefix of it.

    b0/b1 model a device that pins the top KV before decoding (``shared-max``: the reserved
    figure is what they claim). i3 models reserving address space once and committing pages
    on write (``reserve-commit``: the committed figure is what it claims). On a host both are
    the same lazily committed anonymous mapping, so one class serves both, labelled by kind.
    """

    shared_buffer = True

    def __init__(
        self, cfg: ModelConfig, ladder: tuple[int, ...], precision: str, kind: str, batch: int = 1
    ):
        super().__init__(cfg, ladder, precision, batch)
        self.kind = kind
        self._arena = KVArena(cfg, ladder[-1], precision, batch)

    @property
    def arena(self) -> KVArena:
        return self._arena

    def reserved_bytes(self) -> int:
        return self._arena.nbytes

    def buffer_capacity(self, capacity: int) -> int | None:
        top = self._arena.capacity
        return top if capacity < top else None

    def grow_to(self, capacity: int) -> Migration:
        return Migration(0)


class GrowingKV(KVStore):
    """An allocation at the active rung's capacity; a boundary allocates the next capacity,
    copies the live slots and frees the old allocation (both coexist meanwhile)."""

    kind = "copy-grow"
    shared_buffer = False

    def __init__(
        self, cfg: ModelConfig, ladder: tuple[int, ...], precision: str, first: int, batch: int = 1
    ):
        super().__init__(cfg, ladder, precision, batch)
        self._arena = KVArena(cfg, first, precision, batch)
        self._retired: KVArena | None = None

    @property
    def arena(self) -> KVArena:
        return self._arena

    def reserved_bytes(self) -> int:
        retired = self._retired.nbytes if self._retired is not None else 0
        return self._arena.nbytes + retired

    def grow_to(self, capacity: int) -> Migration:
        if capacity <= self._arena.capacity:
            return Migration(0)
        old = self._arena
        t0 = time.perf_counter()
        new = KVArena(self.cfg, capacity, self.precision, self.batch)
        t1 = time.perf_counter()
        copied = new.copy_prefix_from(old, self.length)
        t2 = time.perf_counter()
        self._arena = new
        self._retired = old  # closed by release_retired() once requests are rebound
        return Migration(copied, old.nbytes + new.nbytes, t1 - t0, t2 - t1)

    def release_retired(self) -> None:
        if self._retired is not None:
            self._retired.close()
            self._retired = None


def make_store(
    policy: KVPolicy,
    cfg: ModelConfig,
    rungs: tuple[int, ...],
    precision: str,
    first: int,
    batch: int = 1,
) -> KVStore:
    """The store for a schedule's KV policy over its rungs, starting at rung ``first``, for
    ``batch`` sequences."""
    if policy is KVPolicy.COPY_GROW:
        return GrowingKV(cfg, rungs, precision, first, batch)
    return TopCapacityKV(cfg, rungs, precision, policy.value, batch)
