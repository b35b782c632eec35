"""Memoized dependency-vector sorts of the NPU compiler (patches/npu_compiler), from Python.

* :func:`read_loaded_counters` / :func:`reset_loaded_counters`: the counters of a patched NPU
  compiler loaded anywhere in this process (found with dlsym, also when loaded RTLD_LOCAL).
* :func:`op_graph_from_model` / :func:`preset_op_graph`: the dependency graph of a real
  OpenVINO model, optionally tiled the way the compiler splits large ops, for the replay.
* :func:`native`: the extension (``compile_ahead._depsort``) with the cache itself, the
  AsyncDepsInfo stand-in (``DepsModel``) and the scheduler replay (``record`` / ``replay``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from types import ModuleType
from typing import TYPE_CHECKING

from compile_ahead.errors import CompileAheadError

if TYPE_CHECKING:
    import openvino as ov

COUNTERS_SYMBOL = "compile_ahead_depsort_counters"
RESET_SYMBOL = "compile_ahead_depsort_reset"
STATS_VERSION = 1  # the frozen struct compile_ahead_depsort_stats layout the getter writes


def native() -> ModuleType:
    """The native module; imported on first use so importing this module stays cheap."""
    from compile_ahead import _depsort

    return _depsort


@dataclass(frozen=True)
class DepsortCounters:
    """Totals of the sorted-deps cache in one library (see patches/npu_compiler/README.md)."""

    requests: int
    hits: int
    misses: int
    elements_sorted: int
    sort_ns: int
    invalidations: int
    shadow_checks: int
    library: str | None = None

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    @classmethod
    def from_native(cls, raw: dict) -> DepsortCounters:
        return cls(
            requests=raw["requests"],
            hits=raw["hits"],
            misses=raw["misses"],
            elements_sorted=raw["elements_sorted"],
            sort_ns=raw["sort_ns"],
            invalidations=raw["invalidations"],
            shadow_checks=raw["shadow_checks"],
            library=raw.get("library"),
        )


def read_loaded_counters() -> DepsortCounters | None:
    """Counters of the patched NPU compiler loaded in this process, or None when none is.

    The patched libnpu_driver_compiler.so (and npu_mlir_compiler module) export the getters from
    their own objects; any loaded object exporting them answers, also one loaded RTLD_LOCAL.
    """
    raw = native().read_loaded_counters()
    if raw is None:
        return None
    if raw["version"] != STATS_VERSION:
        raise CompileAheadError(
            f"{raw.get('library')}: {COUNTERS_SYMBOL} wrote stats layout version "
            f"{raw['version']}, this reader knows version {STATS_VERSION}"
        )
    return DepsortCounters.from_native(raw)


def reset_loaded_counters() -> bool:
    """Zero the loaded patched compiler's counters; False when none is loaded."""
    return bool(native().reset_loaded_counters())


@dataclass(frozen=True)
class OpGraph:
    """Ops in topological order: what each depends on, which are data loads, buffer bytes."""

    name: str
    deps: list[list[int]]
    is_data: list[bool]
    bytes: list[int]

    @property
    def op_count(self) -> int:
        return len(self.deps)

    @property
    def edge_count(self) -> int:
        return sum(len(d) for d in self.deps)


def _output_bytes(node: ov.Node) -> int:
    total = 0
    for i in range(node.get_output_size()):
        shape = node.get_output_partial_shape(i)
        if not shape.is_static:
            continue
        total += math.prod(shape.to_shape()) * node.get_output_element_type(i).size
    return total


def op_graph_from_model(
    model: ov.Model, name: str, tile_bytes: int | None = None, max_tiles: int = 8
) -> OpGraph:
    """The op DAG of `model`. Constants and ops fed only by data ops are data ops.

    With `tile_bytes`, an op whose output exceeds it becomes up to `max_tiles` ops (the compiler
    tiles large ops to fit its fast memory): tile j reads tile j of a tiled data input and every
    tile of a tiled compute input; each tile's buffer is capped at `tile_bytes`.
    """
    ops = model.get_ordered_ops()
    position = {op.get_name(): i for i, op in enumerate(ops)}
    sources: list[list[int]] = []
    is_data: list[bool] = []
    sizes: list[int] = []
    for op in ops:
        srcs = sorted(
            {position[inp.get_source_output().get_node().get_name()] for inp in op.inputs()}
        )
        sources.append(srcs)
        # Weights and what is computed from weights alone: loaded by DMA, prefetched.
        constant = op.get_type_name() == "Constant"
        is_data.append(constant or (bool(srcs) and all(is_data[s] for s in srcs)))
        sizes.append(_output_bytes(op))

    tiles: list[list[int]] = []  # op -> its tile indices in the result
    deps: list[list[int]] = []
    data: list[bool] = []
    out_bytes: list[int] = []
    for op, srcs in enumerate(sources):
        count = 1
        if tile_bytes and sizes[op] > tile_bytes:
            count = min(max_tiles, math.ceil(sizes[op] / tile_bytes))
        mine = []
        for j in range(count):
            tile_deps: set[int] = set()
            for s in srcs:
                src_tiles = tiles[s]
                if is_data[s]:
                    tile_deps.add(src_tiles[j % len(src_tiles)])
                else:
                    tile_deps.update(src_tiles)
            mine.append(len(deps))
            deps.append(sorted(tile_deps))
            data.append(is_data[op])
            per_tile = sizes[op] // count
            out_bytes.append(min(per_tile, tile_bytes) if tile_bytes else per_tile)
        tiles.append(mine)
    return OpGraph(name=name, deps=deps, is_data=data, bytes=out_bytes)


def preset_op_graph(
    preset: str,
    chunk: int = 1,
    capacity: int = 1024,
    tile_bytes: int | None = None,
    max_tiles: int = 8,
) -> OpGraph:
    """The op graph of a preset's decode (chunk=1) or prefill (chunk>1) step model.

    Synthetic zero weights: the graph is exactly the real model's, nothing is computed.
    """
    from compile_ahead.runtime.graphs.decoder import build_step_model
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.model.presets import PRESETS
    from compile_ahead.runtime.model.synthetic_store import SyntheticStore

    cfg = PRESETS[preset].config
    model = build_step_model(
        cfg,
        SyntheticStore(cfg, zeros=True),
        GraphSpec(capacity=capacity, chunk=chunk, kv_precision="f16"),
    )
    label = f"{preset}/{'decode' if chunk == 1 else f'prefill{chunk}'}/C{capacity}"
    return op_graph_from_model(model, label, tile_bytes=tile_bytes, max_tiles=max_tiles)


@dataclass(frozen=True)
class DepsortReading:
    """Counters of a patched NPU compiler (dependency-sort cache), when one is loaded here."""

    available: bool
    reason: str  # why unavailable, or where the values came from
    values: dict[str, int] | None  # None when unavailable: never reported as zeros

    def to_json(self) -> dict:
        return {"available": self.available, "reason": self.reason, "values": self.values}


def depsort_reading() -> DepsortReading:
    """The patched NPU compiler's counters for a report: their values, or why there are none."""
    try:
        loaded = read_loaded_counters()
    except ImportError:
        return DepsortReading(False, "the compile_ahead._depsort module is not built", None)
    if loaded is None:
        return DepsortReading(
            False,
            "no patched NPU compiler (dependency-sort counters) is loaded in this process",
            None,
        )
    values = {f.name: getattr(loaded, f.name) for f in fields(loaded) if f.name != "library"}
    return DepsortReading(True, f"read from {loaded.library}", values)
