"""The device executor: each bucket [B, C] is a compiled decode graph of the runtime (the
source's ``build_graph`` at batch B and capacity C, compiled through the compile cache by
``compile_step``), and each request's prompt is prefilled by a batch-1 prefill graph into its
own row of the KV (``prefill_chunks``, as a batched run's sequences are).

The KV is held one of two ways (``kv``):

- ``reserve`` (i3 style): one KVArena for the top bucket [B_max, C_max], reserved once; pages
  are committed as slots are written. A bucket's graph reads its first B rows and first C
  slots (GraphSpec.buffer_capacity), so moving up costs nothing and moving down in B copies
  only the rows beyond the new B into free rows below it. One prefill graph, at the top
  capacity, prefills every row.
- ``copy`` (i1/i2 style): a KVArena of the active bucket's size; a move allocates the new
  bucket's arena, copies the live rows' filled slots and frees the old one. Rows are as long
  as the bucket's capacity, so each capacity has its prefill graph.

On the CPU plugin every compiled whole graph holds its own repacked copy of the weights, so a
bucket costs about the weights' size in memory (bucket_bytes, what the memory budget counts).

Background compiles run on one worker thread (compile_model releases the GIL while the device
compiles); the decode goes on meanwhile.
"""

from __future__ import annotations

import concurrent.futures
import resource
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.precision import STORAGE_DTYPES
from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.graphs.step import StepOutput
from compile_ahead.runtime.ladder.prefill import prefill_chunks
from compile_ahead.runtime.ladder.settings.capacities import NAMED_LADDERS, Ladder
from compile_ahead.runtime.model.architecture import ModelConfig
from compile_ahead.runtime.model.kv_arena import KVArena
from compile_ahead.runtime.model.weights import expected_shapes
from compile_ahead.runtime.serving.buckets import Bucket, Grid
from compile_ahead.runtime.serving.engine import ServingEngine
from compile_ahead.runtime.serving.events import ServingSettings
from compile_ahead.runtime.serving.executor import WallClock, is_chunk, padded
from compile_ahead.runtime.serving.policies import make_policy
from compile_ahead.runtime.sources.base import ModelSource

KV_MODES = ("reserve", "copy")
# Tokens per call of the batch-1 prefill graph (capped at its capacity; the last chunk of a
# prompt padded). At a few tokens per call the matmuls are bound by reading the weights, so a
# call of 128 costs far less than eight of 16: a prompt of more than a few dozen tokens is
# prefilled sooner, and the rows decoding beside it wait less. A shorter prompt pays padding.
PREFILL_CHUNK = 128


class RowsView(KVArena):
    """The first ``batch`` rows of an arena, [batch, kv, C, hd] views of its memory (no copy,
    owning nothing): what a bucket of B rows binds in ``reserve``."""

    def __init__(self, parent: KVArena, batch: int):  # no mapping of its own
        self.cfg, self.capacity, self.precision = parent.cfg, parent.capacity, parent.precision
        self.batch = batch
        self.shape = (batch, *parent.shape[1:])
        self.row_bytes, self.stride, self.nbytes = parent.row_bytes, parent.stride, 0
        self.keys = [k[:batch] for k in parent.keys]
        self.values = [v[:batch] for v in parent.values]

    def close(self) -> None:
        self.keys.clear()
        self.values.clear()


class RowKV:
    """One row as prefill_chunks sees it: its filled length, and appending after it."""

    def __init__(self, arena: KVArena, row: int):
        self.arena = arena.row(row)
        self.length = 0

    def append(self, out: StepOutput, n: int) -> None:
        for layer, (k, v) in enumerate(zip(out.new_keys, out.new_values, strict=True)):
            self.arena.write(layer, self.length, k[:, :, :n], v[:, :, :n])
        self.length += n


def weight_bytes(cfg: ModelConfig, inference_precision: str) -> int:
    """The weights' bytes at the inference precision: what each compiled whole graph holds
    on the CPU plugin, which repacks its own copy of them."""
    per = 4 if inference_precision == "f32" else 2
    return per * sum(int(np.prod(shape)) for shape in expected_shapes(cfg).values())


class DeviceExecutor:
    def __init__(
        self, source: ModelSource, grid: Grid, options: CompileOptions, kv: str = "reserve",
        eos_token_ids: frozenset[int] = frozenset(), prefill_chunk: int = PREFILL_CHUNK,
    ) -> None:  # fmt: skip
        if kv not in KV_MODES:
            raise CompileAheadError(f"unknown KV mode {kv!r} (known: {', '.join(KV_MODES)})")
        check_prefill_chunk(prefill_chunk)
        self.source, self.grid, self.kv = source, grid, kv
        self.prefill_chunk = prefill_chunk
        self.options = options.resolved()
        self.clock = WallClock()
        self._eos = eos_token_ids
        self._precision = self.options.kv_precision or "f32"
        self._graph_bytes = weight_bytes(source.config, self.options.inference_precision or "")
        self.steps: dict[Bucket, Any] = {}
        self.prefills: dict[int, Any] = {}  # prefill_capacity -> batch-1 prefill step
        self.active: Bucket | None = None
        self.arena: KVArena | None = None  # reserve: the one top arena; copy: the active's
        self.view: KVArena | None = None  # what the active bucket's graph reads
        if kv == "reserve":
            top = grid.largest
            self.arena = KVArena(source.config, top.capacity, self._precision, top.batch)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="serving-compile")
        self._background: tuple[Bucket, Future[tuple[dict, float]]] | None = None

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos

    def bucket_bytes(self, bucket: Bucket) -> int:
        """One weights copy for the decode graph; with ``copy`` one more for its capacity's
        prefill graph (counted per bucket: an upper bound). With ``reserve`` the one prefill
        graph is a fixed cost, outside the budget."""
        return self._graph_bytes * (2 if self.kv == "copy" else 1)

    @property
    def slot_bytes(self) -> int:
        """One row's KV slot, every layer's K and V."""
        cfg, itemsize = self.source.config, STORAGE_DTYPES[self._precision].itemsize
        return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * itemsize

    def fixed_costs(self) -> dict[str, Any]:
        """What a cost model fitted from this executor's runs cannot see in them
        (runtime.serving.calibration): a bucket's bytes, a slot's KV bytes, the KV mode."""
        return {
            "bucket_bytes": self.bucket_bytes(self.grid.smallest),
            "kv_bytes_per_slot": self.slot_bytes,
            "kv": self.kv,
            "prefill_chunk": min(self.prefill_chunk, self.grid.top_capacity),
        }

    def prefill_capacity(self, bucket: Bucket) -> int:
        """The capacity of the prefill graph a bucket's rows are prefilled by: with
        ``reserve`` one graph at the top capacity for every bucket (it reads the top
        reservation's rows), with ``copy`` one per capacity (the rows are that long)."""
        return self.grid.top_capacity if self.kv == "reserve" else bucket.capacity

    # --- compiles -----------------------------------------------------------------------------

    def _specs(self, bucket: Bucket) -> tuple[GraphSpec, GraphSpec]:
        """The bucket's decode graph, and the batch-1 prefill graph of its capacity."""
        b, c = bucket
        top = self.grid.top_capacity
        buffer = top if self.kv == "reserve" and c < top else None
        decode = GraphSpec(c, 1, self._precision, buffer, batch=b)
        p = self.prefill_capacity(bucket)
        return decode, GraphSpec(p, min(self.prefill_chunk, p), self._precision)

    def _compile(self, bucket: Bucket) -> tuple[dict, float]:
        """The bucket's decode graph, and its capacity's prefill graph if not yet compiled."""
        t0 = time.perf_counter()
        decode, prefill = self._specs(bucket)
        made = {"decode": compile_step(self.source, decode, self.options).step}
        if self.prefill_capacity(bucket) not in self.prefills:
            made["prefill"] = compile_step(self.source, prefill, self.options).step
        return made, time.perf_counter() - t0

    def _take(self, bucket: Bucket, made: dict) -> None:
        self.steps[bucket] = made["decode"]
        if "prefill" in made:
            self.prefills.setdefault(self.prefill_capacity(bucket), made["prefill"])

    def compile(self, bucket: Bucket) -> float:
        made, seconds = self._compile(bucket)
        self._take(bucket, made)
        return seconds

    def start_compile(self, bucket: Bucket) -> None:
        assert self._background is None, "one background compile at a time"
        self._background = (bucket, self._pool.submit(self._compile, bucket))

    def finished_compile(self) -> tuple[Bucket, float] | None:
        if self._background is None or not self._background[1].done():
            return None
        bucket, future = self._background
        self._background = None
        made, seconds = future.result()  # raises the compile's error
        self._take(bucket, made)
        return bucket, seconds

    def wait(self, until_s: float | None) -> None:
        timeout = None if until_s is None else max(until_s - self.clock.now(), 0.0)
        if self._background is not None:
            concurrent.futures.wait([self._background[1]], timeout)
        elif timeout:
            time.sleep(timeout)

    def release(self, bucket: Bucket) -> None:
        self.steps.pop(bucket, None)
        p = self.prefill_capacity(bucket)
        if not any(self.prefill_capacity(b) == p for b in self.steps):
            self.prefills.pop(p, None)

    # --- serving ------------------------------------------------------------------------------

    def activate(self, bucket: Bucket, moves: Mapping[int, int], lengths: Mapping[int, int]) -> int:
        if self.kv == "reserve":
            assert self.arena is not None
            copied = _move_rows(self.arena, self.arena, moves, lengths, skip_same=True)
            view: KVArena = RowsView(self.arena, bucket.batch)
        else:
            new = KVArena(self.source.config, bucket.capacity, self._precision, bucket.batch)
            copied = (
                _move_rows(self.arena, new, moves, lengths, skip_same=False) if self.arena else 0
            )
            if self.active is not None and self.active in self.steps:
                self._unbind(self.active)
            for capacity, step in list(self.prefills.items()):  # bound to the old rows
                if step.bound is not None:
                    self.prefills[capacity] = self.source.make_step(step.compiled, step.spec)
            if self.arena is not None:
                self.arena.close()
            self.arena = view = new
        self.steps[bucket].bind(view)
        self.view, self.active = view, bucket
        return copied

    def _unbind(self, bucket: Bucket) -> None:
        """A fresh request for a bucket's graph, so the old arena is no longer referenced."""
        old = self.steps[bucket]
        self.steps[bucket] = self.source.make_step(old.compiled, old.spec)

    def prefill_tokens(self, prompt_len: int) -> int:
        assert self.active is not None
        step = self.prefills[self.prefill_capacity(self.active)]  # the graph that prefills
        return padded(prompt_len, step.spec.chunk)

    def prefill(self, row: int, prompt: Sequence[int]) -> int:
        assert self.active is not None and self.view is not None and self.arena is not None
        step = self.prefills[self.prefill_capacity(self.active)]
        kv = RowKV(self.arena, row)
        step.bind(kv.arena)
        logits = prefill_chunks(step, prompt, kv)  # type: ignore[arg-type]
        return int(np.argmax(logits))

    def step(self, feeds: Mapping[int, tuple[int, int]]) -> dict[int, int]:
        assert self.active is not None and self.view is not None
        b = self.active.batch
        ids, past = np.zeros(b, np.int64), np.zeros(b, np.int64)
        rows = np.array(sorted(feeds), np.int64)
        for r in rows:
            ids[r], past[r] = feeds[int(r)]
        out = self.steps[self.active].run(ids, past)
        logits = out.logits.reshape(b, -1)
        for layer, (k, v) in enumerate(zip(out.new_keys, out.new_values, strict=True)):
            self.view.write_rows(layer, rows, past[rows], k, v)
        return {int(r): int(np.argmax(logits[r])) for r in rows}

    def peak_rss_bytes(self) -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.steps.clear()
        self.prefills.clear()


def check_prefill_chunk(chunk: int) -> None:
    if not is_chunk(chunk):
        raise CompileAheadError(f"the prefill chunk must be a whole number >= 1, got {chunk!r}")


def _move_rows(
    src: KVArena, dst: KVArena, moves: Mapping[int, int], lengths: Mapping[int, int],
    skip_same: bool,
) -> int:  # fmt: skip
    """Copy each moved row's filled slots (old row -> new row); the bytes copied."""
    copied = 0
    per_slot = 2 * src.cfg.num_layers * src.cfg.num_kv_heads * src.row_bytes
    for old, new in moves.items():
        if skip_same and old == new:
            continue
        n = lengths[old]
        for s, d in zip(src.keys + src.values, dst.keys + dst.values, strict=True):
            d[new, :, :n] = s[old, :, :n]
        copied += n * per_slot
    return copied


def device_engine(source: ModelSource, settings: ServingSettings) -> ServingEngine:
    """A ServingEngine on this executor for ``source``, as ``settings`` say (refused in one
    line when the grid does not fit the model or the memory budget a bucket)."""
    ladder = settings.capacities or NAMED_LADDERS["default"]
    grid = Grid(tuple(settings.batch_sizes), tuple(Ladder.parse(list(ladder)).rungs))
    limit = source.config.max_position_embeddings
    if grid.top_capacity > limit:
        raise CompileAheadError(
            f"the top capacity {grid.top_capacity} exceeds the model's maximum context ({limit})"
        )
    extra = dict(settings.compile_options or {})
    kv = str(extra.pop("kv", "reserve"))
    stop_at_eos = bool(extra.pop("stop_at_eos", False))
    chunk = extra.pop("prefill_chunk", PREFILL_CHUNK)
    eos = frozenset(source.config.eos_token_ids) if stop_at_eos else frozenset()
    options = extra.pop("options", None) or CompileOptions(**extra)
    executor = DeviceExecutor(source, grid, options, kv, eos, chunk)
    try:
        return ServingEngine(
            grid, make_policy(settings.policy), executor, settings.memory_budget_bytes
        )
    except CompileAheadError:
        executor.close()
        raise
