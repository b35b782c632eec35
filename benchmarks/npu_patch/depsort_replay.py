"""Replay the NPU compiler's dependency queries on real-model op graphs: cached vs uncached.

For each graph (the OpenVINO op graph of a preset's decode / prefill step, tiled the way the
compiler splits large ops), a list scheduler modelled on the feasible memory scheduler runs
once and its AsyncDepsInfo calls are recorded: rounds that re-query the ready compute head,
every ready data op within the prefetch window and the completing ops; spill-op insertions
when memory runs out; control edges, optimizeDepsMap and a second scheduling pass. The trace
is then replayed on a fresh model through the cached path (the patch) and the upstream path
(copy and sort on every call), alternating A/B/B/A, `--reps` times each, in one process.

Reported per graph: requests, hit rate (the seed reports 94.2% on real NPU compiles),
misses, invalidations, and the speedup of the query path (time inside runs of consecutive
queries) and of the whole replay, as medians over the interleaved pairs with their range.

    python benchmarks/npu_patch/depsort_replay.py                 # both presets, decode + prefill
    python benchmarks/npu_patch/depsort_replay.py --json out.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import orders
from _shared.results import write_result

from compile_ahead.profiling.npu_patches import depsort

SEED_HIT_RATE = 0.942
SEED_REQUESTS = 33.33e6


@dataclass
class GraphResult:
    graph: str
    ops: int
    edges: int
    trace_events: int
    rounds: int
    spills: int
    control_edges: int
    requests: int
    hits: int
    misses: int
    hit_rate: float
    invalidations: int
    elements_sorted_cached: int
    elements_sorted_upstream: int
    cached_sort_ms: float
    query_ms_cached: float
    query_ms_upstream: float
    query_speedup: float
    query_speedup_min: float
    query_speedup_max: float
    total_speedup: float
    identical: bool


def measure(graph: depsort.OpGraph, args: argparse.Namespace) -> GraphResult:
    native = depsort.native()
    trace = native.record(
        graph.deps,
        graph.is_data,
        graph.bytes,
        memory_bytes=args.memory_kib * 1024,
        prefetch_levels=args.prefetch_levels,
    )
    runs: dict[str, list[dict]] = {"cached": [], "upstream": []}
    for _, order in orders(("cached", "upstream"), args.reps):
        for mode in order:
            runs[mode].append(native.replay(trace, mode))
    cached, upstream = runs["cached"], runs["upstream"]
    identical = len({r["checksum"] for r in cached + upstream}) == 1
    query_ratios = [u["query_ns"] / c["query_ns"] for c, u in zip(cached, upstream, strict=True)]
    total_ratios = [u["total_ns"] / c["total_ns"] for c, u in zip(cached, upstream, strict=True)]
    first = cached[0]
    return GraphResult(
        graph=graph.name,
        ops=graph.op_count,
        edges=graph.edge_count,
        trace_events=len(trace),
        rounds=trace.rounds,
        spills=trace.spills,
        control_edges=trace.control_edges,
        requests=first["requests"],
        hits=first["hits"],
        misses=first["misses"],
        hit_rate=first["hits"] / first["requests"],
        invalidations=first["invalidations"],
        elements_sorted_cached=first["elements_sorted"],
        elements_sorted_upstream=upstream[0]["elements_sorted"],
        cached_sort_ms=statistics.median(r["sort_ns"] for r in cached) / 1e6,
        query_ms_cached=statistics.median(r["query_ns"] for r in cached) / 1e6,
        query_ms_upstream=statistics.median(r["query_ns"] for r in upstream) / 1e6,
        query_speedup=statistics.median(query_ratios),
        query_speedup_min=min(query_ratios),
        query_speedup_max=max(query_ratios),
        total_speedup=statistics.median(total_ratios),
        identical=identical,
    )


def graphs(args: argparse.Namespace):
    for preset in args.presets:
        for chunk in args.chunks:
            yield depsort.preset_op_graph(
                preset,
                chunk=chunk,
                capacity=args.capacity,
                tile_bytes=args.tile_kib * 1024 if args.tile_kib else None,
                max_tiles=args.max_tiles,
            )


def print_row(r: GraphResult) -> None:
    print(
        f"{r.graph:<32} {r.ops:>6} {r.requests / 1e6:>8.2f}M {r.hit_rate:>7.1%} "
        f"{r.misses:>9} {r.invalidations:>8} {r.query_ms_upstream:>9.1f} {r.query_ms_cached:>8.1f} "
        f"{r.query_speedup:>6.2f}x ({r.query_speedup_min:.2f}-{r.query_speedup_max:.2f}) "
        f"{r.total_speedup:>6.2f}x {'yes' if r.identical else 'NO'}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["qwen2.5-0.5b", "qwen2.5-7b"])
    parser.add_argument(
        "--chunks", nargs="+", type=int, default=[1, 16], help="1 = decode, >1 = prefill chunk"
    )
    parser.add_argument("--capacity", type=int, default=1024, help="KV capacity of the graph")
    parser.add_argument("--tile-kib", type=int, default=512, help="0 = no tiling")
    parser.add_argument("--max-tiles", type=int, default=4)
    parser.add_argument("--memory-kib", type=int, default=2048, help="scheduler's fast memory")
    parser.add_argument("--prefetch-levels", type=int, default=35, help="upstream uses 35")
    parser.add_argument("--reps", type=int, default=5, help="A/B pairs per graph")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)

    print(
        f"{'graph':<32} {'ops':>6} {'requests':>9} {'hits':>7} {'misses':>9} {'invalid':>8} "
        f"{'upstr ms':>9} {'cache ms':>8} {'query speedup':>21} {'total':>7} same"
    )
    started = time.perf_counter()
    results = []
    for graph in graphs(args):
        results.append(measure(graph, args))
        print_row(results[-1])
    requests = sum(r.requests for r in results)
    hits = sum(r.hits for r in results)
    print(
        f"\nall graphs: {requests / 1e6:.2f}M requests, hit rate {hits / requests:.1%} "
        f"(seed: {SEED_REQUESTS / 1e6:.2f}M sorts per compile, {SEED_HIT_RATE:.1%} hits); "
        f"{time.perf_counter() - started:.0f} s"
    )
    if args.json:
        write_result(Path(args.json), "depsort_replay", [asdict(r) for r in results], args)
    return 0 if all(r.identical for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
