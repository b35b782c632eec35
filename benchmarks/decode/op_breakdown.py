"""Where a decode step's time goes, per operation type: our rung's decode graph compiled with the
CPU plugin's per-node counters (PERF_COUNT), stepped --steps times after a --context-slot
history (random K/V: attention's cost does not depend on the values), the counters of every
step (request.profiling_info: each executed node's type, kernel and real time) summed by node
type. Beside them: the step's wall time and how much of it no node accounts for (the plugin's
and our own per-call overhead; node times may include the counters' own cost, so it can come
out negative), and per type the nodes a step runs and their mean time each, which on a deep,
narrow model (many small layers) shows the per-node cost apart from the weight reads.

    python benchmarks/decode/op_breakdown.py --model smollm2-135m --capacity 1024 --steps 200
    python benchmarks/decode/op_breakdown.py --model tiny --capacity 64 --context 16 --steps 8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _shared.genai_arms import Ours, decode_step, fill_random
from _shared.results import write_result

from compile_ahead.runtime.compile.settings.options import CompileOptions


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--capacity", type=int, default=1024, help="the rung's slots")
    p.add_argument("--context", type=int, default=128, help="filled slots before the first step")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--inference-precision", default=None, help="default: the device's")
    p.add_argument("--top", type=int, default=15, help="node types listed")
    p.add_argument("--json", type=Path, default=None, help="write the result file here")
    return p.parse_args()


class Counters:
    """The per-node counters of every step, summed by node type."""

    def __init__(self) -> None:
        self.node_ms: dict[str, float] = defaultdict(float)
        self.nodes: dict[str, int] = defaultdict(int)
        self.kernels: dict[str, set[str]] = defaultdict(set)

    def add(self, request) -> None:
        for info in request.profiling_info:
            if info.status.name != "EXECUTED":
                continue
            self.node_ms[info.node_type] += info.real_time.total_seconds() * 1e3
            self.nodes[info.node_type] += 1
            self.kernels[info.node_type].add(info.exec_type)

    def rows(self, steps: int) -> list[dict]:
        in_nodes = sum(self.node_ms.values()) / steps
        rows = []
        for kind, ms in sorted(self.node_ms.items(), key=lambda kv: -kv[1]):
            per_step, count = ms / steps, self.nodes[kind] / steps
            rows.append(
                {
                    "node_type": kind,
                    "ms_per_step": per_step,
                    "share": per_step / in_nodes,
                    "nodes_per_step": count,
                    "us_per_node": 1e3 * per_step / count,
                    "kernels": sorted(self.kernels[kind]),
                }
            )
        return rows


def main() -> None:
    args = parse_args()
    options = CompileOptions(
        inference_precision=args.inference_precision, extra_config={"PERF_COUNT": "YES"}
    ).resolved()
    ours = Ours(Path(args.model), args.capacity, options, prefill=False)
    fill_random(ours.arena, args.context)
    counters, walls, token = Counters(), list[float](), 11
    for i in range(args.steps):
        t0 = time.perf_counter()
        token = decode_step(ours.decode, ours.arena, token, args.context + i)
        walls.append(time.perf_counter() - t0)
        counters.add(ours.decode.request)
    steps = args.steps
    wall_ms = 1e3 * float(np.mean(walls))
    in_nodes = sum(counters.node_ms.values()) / steps
    print(
        f"{ours.source.label}: capacity {args.capacity}, context {args.context}.."
        f"{args.context + steps}, {options.inference_precision}; step {wall_ms:.2f} ms mean "
        f"({1e3 * statistics.median(walls):.2f} median), {in_nodes:.2f} ms in nodes, "
        f"{wall_ms - in_nodes:.2f} ms outside them; "
        f"{sum(counters.nodes.values()) / steps:.0f} nodes executed per step"
    )
    print("| Node type | ms per step | share | nodes per step | us per node | kernels |")
    print("|---|---|---|---|---|---|")
    rows = counters.rows(steps)
    for row in rows[: args.top]:
        print(
            f"| {row['node_type']} | {row['ms_per_step']:.3f} | {100 * row['share']:.1f}% "
            f"| {row['nodes_per_step']:.0f} | {row['us_per_node']:.1f} "
            f"| {', '.join(row['kernels'][:3])} |"
        )
    if args.json:
        results = {"step_ms_mean": wall_ms, "node_ms_per_step": in_nodes, "node_types": rows}
        write_result(args.json, "op_breakdown", results, args)


if __name__ == "__main__":
    main()
