"""The memory a decoder's KV cache lives in: per layer K and V of shape [B, kv_heads, capacity,
head_dim] (head-major; B sequences, 1 unless batched), carved page-aligned out of one anonymous
mmap."""

from __future__ import annotations

import contextlib
import mmap
from typing import Protocol

import numpy as np
import openvino as ov

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.precision import OV_TYPES, STORAGE_DTYPES
from compile_ahead.runtime.model.architecture import ModelConfig

PAGE = mmap.PAGESIZE


class Bindable(Protocol):
    """A compiled rung graph whose past-KV inputs can point at an arena."""

    bound: KVArena | None

    def bind(self, arena: KVArena) -> None: ...


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


class KVArena:
    """Per-layer K/V arrays of one capacity over one anonymous mapping."""

    def __init__(self, cfg: ModelConfig, capacity: int, precision: str, batch: int = 1):
        self.cfg = cfg
        self.capacity = capacity
        self.precision = precision
        self.batch = batch
        dtype = STORAGE_DTYPES[precision]
        self.shape = (batch, cfg.num_kv_heads, capacity, cfg.head_dim)
        self.row_bytes = cfg.head_dim * dtype.itemsize  # one slot of one head
        tensor_bytes = batch * cfg.num_kv_heads * capacity * self.row_bytes
        self.stride = _round_up(tensor_bytes, PAGE)  # page-aligned start per tensor
        self.nbytes = 2 * cfg.num_layers * self.stride
        try:
            self._map = mmap.mmap(-1, self.nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except (OSError, OverflowError, MemoryError) as err:
            raise CompileAheadError(
                f"out of memory reserving {self.nbytes / 2**20:.1f} MiB of KV for capacity "
                f"{capacity}{f' x {batch} sequences' if batch > 1 else ''} ({err})"
            ) from None
        flat = np.frombuffer(self._map, dtype=np.uint8)
        n_elems = tensor_bytes // dtype.itemsize
        views = [
            flat[i * self.stride : i * self.stride + tensor_bytes].view(dtype)[:n_elems]
            for i in range(2 * cfg.num_layers)
        ]
        self.keys = [v.reshape(self.shape) for v in views[0::2]]
        self.values = [v.reshape(self.shape) for v in views[1::2]]

    def tensors(self) -> tuple[list[ov.Tensor], list[ov.Tensor]]:
        """Tensors aliasing the arrays (no copy); valid only while this arena is open."""
        t = OV_TYPES[self.precision]
        return (
            [ov.Tensor(a, list(a.shape), t) for a in self.keys],
            [ov.Tensor(a, list(a.shape), t) for a in self.values],
        )

    def committed_bytes(self, length: int | list[int]) -> int:
        """Bytes of the pages that writing slots [0, length) of every head has touched
        (``length`` per sequence for a batch, or one for all)."""
        lengths = [length] * self.batch if isinstance(length, int) else length
        head_bytes = self.capacity * self.row_bytes
        pages, prev_last = 0, -1
        # Heads are laid out back to back (sequence-major); neighbours can share a page.
        for h in range(self.batch * self.cfg.num_kv_heads):
            n = lengths[h // self.cfg.num_kv_heads]
            if n <= 0:
                continue
            first = h * head_bytes // PAGE
            last = (h * head_bytes + n * self.row_bytes - 1) // PAGE
            pages += max(0, last - max(first, prev_last + 1) + 1)
            prev_last = max(prev_last, last)
        return pages * PAGE * 2 * self.cfg.num_layers

    def write(self, layer: int, start: int, new_k: np.ndarray, new_v: np.ndarray) -> None:
        n = new_k.shape[2]
        self.keys[layer][:, :, start : start + n] = new_k.view(self.keys[layer].dtype)
        self.values[layer][:, :, start : start + n] = new_v.view(self.values[layer].dtype)

    def write_rows(
        self,
        layer: int,
        sequences: np.ndarray,
        slots: np.ndarray,
        new_k: np.ndarray,
        new_v: np.ndarray,
    ) -> None:
        """A batched step's one new row per sequence: sequence ``sequences[i]`` at its slot
        ``slots[i]``, from row ``sequences[i]`` of new_k/new_v [B, kv, 1, hd]."""
        keys, values = self.keys[layer], self.values[layer]
        keys[sequences, :, slots] = new_k[sequences, :, 0].view(keys.dtype)
        values[sequences, :, slots] = new_v[sequences, :, 0].view(values.dtype)

    def copy_prefix_from(self, other: KVArena, length: int) -> int:
        """The first ``length`` slots of every sequence; the bytes copied."""
        for dst, src in zip(self.keys + self.values, other.keys + other.values, strict=True):
            dst[:, :, :length] = src[:, :, :length]
        per_sequence = 2 * self.cfg.num_layers * self.cfg.num_kv_heads * length * self.row_bytes
        return self.batch * per_sequence

    def row(self, sequence: int) -> KVArena:
        """Sequence ``sequence``'s K/V as a one-sequence arena over this one's memory (no
        copy): what a batch-1 graph binds to write or read that sequence alone."""
        return ArenaRow(self, sequence)

    def close(self) -> None:
        """Unmap now. Every bound request must have been rebound or released first."""
        self.keys.clear()
        self.values.clear()
        # A view still alive elsewhere keeps the mapping; it goes when that view does.
        with contextlib.suppress(BufferError):
            self._map.close()


class ArenaRow(KVArena):
    """One sequence of a batched arena, [1, kv_heads, capacity, head_dim] views into its
    memory: it owns nothing, so it is valid only while that arena is open."""

    def __init__(self, parent: KVArena, sequence: int):  # no mapping of its own
        if not 0 <= sequence < parent.batch:
            raise IndexError(f"sequence {sequence} of a batch of {parent.batch}")
        self.cfg = parent.cfg
        self.capacity = parent.capacity
        self.precision = parent.precision
        self.batch = 1
        self.shape = (1, *parent.shape[1:])
        self.row_bytes = parent.row_bytes
        self.stride = parent.stride
        self.nbytes = 0  # the parent's memory
        self.keys = [k[sequence : sequence + 1] for k in parent.keys]
        self.values = [v[sequence : sequence + 1] for v in parent.values]

    def close(self) -> None:
        self.keys.clear()
        self.values.clear()
