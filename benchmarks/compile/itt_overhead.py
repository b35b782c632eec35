"""Cost of the ITT collector on compile_model, measured interleaved in fresh processes.

The collector must be announced before libopenvino loads, so every sample is its own process.
Three modes:

- "on": compile_ahead imported normally, the collector bound and recording;
- "null": the collector bound but recording nothing (COMPILE_AHEAD_ITT_RECORD=0): libraries
  see a collector exactly as in "on" (TBB, for one, takes a different scheduling path when a
  collector is present), so on/null is the cost of recording itself;
- "off": no collector at all (COMPILE_AHEAD_ITT=0), the plain wheel.

Each round runs every mode once, in a rotated order, so drift on a shared machine hits all of
them. Each process builds the graph once, compiles it once to warm up, then times --compiles.

    python benchmarks/compile/itt_overhead.py --model tiny --rounds 6
    python benchmarks/compile/itt_overhead.py --model qwen2.5-0.5b --capacity 1024 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import fresh_json

CHILD = """
import json, sys, time
import compile_ahead
from compile_ahead.runtime.graphs import decoder
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.base.ov_core import core
from compile_ahead.runtime.compile.settings.options import CompileOptions, device_config
from compile_ahead.runtime.sources.resolve import resolve_model

model, capacity, compiles = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
source = resolve_model(model)
options = CompileOptions(device="CPU").resolved()
spec = GraphSpec(capacity=capacity, chunk=1, kv_precision=options.kv_precision)
ov_model = decoder.build_step_model(source.config, source.weights, spec)
config = device_config(options)
times = []
for i in range(compiles + 1):
    t0 = time.perf_counter()
    compiled = core().compile_model(ov_model, "CPU", config)
    elapsed = time.perf_counter() - t0
    del compiled
    if i:
        times.append(elapsed)
bound, events, cost = [], 0, None
try:
    from compile_ahead import _itt
    bound, events = _itt.bound_libraries(), _itt.stats()["recorded"]
    if events:
        cost = _itt.measure_task_cost_ns(200000)
except ImportError:
    pass
print(json.dumps({"times": times, "bound": len(bound), "events": events // (compiles + 1),
                  "task_cost_ns": cost}))
"""


MODES = ("on", "null", "off")


def run_child(mode: str, args: argparse.Namespace) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("INTEL_LIBITTNOTIFY64", "COMPILE_AHEAD_ITT", "COMPILE_AHEAD_ITT_RECORD")
    }
    if mode == "off":
        env["COMPILE_AHEAD_ITT"] = "0"
    elif mode == "null":
        env["COMPILE_AHEAD_ITT_RECORD"] = "0"
    cmd = [sys.executable, "-c", CHILD, args.model, str(args.capacity), str(args.compiles)]
    result = fresh_json(cmd, env=env)
    if (mode != "off") != bool(result["bound"]):
        sys.exit(f"collector binding in the {mode!r} process is wrong: the comparison is void")
    if mode == "null" and result["events"]:
        sys.exit("the 'null' process recorded events: the comparison is void")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--capacity", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=6, help="rounds of one process per mode")
    p.add_argument("--compiles", type=int, default=3, help="timed compiles per process")
    args = p.parse_args()

    times: dict[str, list[float]] = {m: [] for m in MODES}
    pair_ratios: dict[str, list[float]] = {"on/off": [], "on/null": [], "null/off": []}
    events = 0
    costs: list[float] = []
    t_start = time.monotonic()
    for r in range(args.rounds):
        order = MODES[r % 3 :] + MODES[: r % 3]
        medians = {}
        for mode in order:
            res = run_child(mode, args)
            times[mode].extend(res["times"])
            medians[mode] = statistics.median(res["times"])
            events = max(events, res["events"])
            if res["task_cost_ns"] is not None:
                costs.append(res["task_cost_ns"])
        for key in pair_ratios:
            a, b = key.split("/")
            pair_ratios[key].append(medians[a] / medians[b])
        print(
            f"round {r + 1}: "
            + ", ".join(f"{m} {medians[m] * 1e3:.1f} ms" for m in MODES)
            + f"; on/off {pair_ratios['on/off'][-1]:.4f}, on/null {pair_ratios['on/null'][-1]:.4f}",
            flush=True,
        )
    print(
        f"\nmodel {args.model}, C={args.capacity}: {args.rounds} interleaved rounds x 3 processes "
        f"x {args.compiles} compiles, {time.monotonic() - t_start:.0f} s"
    )
    print(
        "compile_model median: "
        + ", ".join(f"{m} {statistics.median(times[m]) * 1e3:.1f} ms" for m in MODES)
    )
    # The direct bound: spans recorded per compile x measured cost of recording one span.
    cost = statistics.median(costs)
    bound_ms = events * cost / 1e6
    print(
        f"recording: up to {events} events per compile x {cost:.0f} ns per recorded span "
        f"= {bound_ms:.3f} ms per compile "
        f"({bound_ms / (statistics.median(times['on']) * 1e3) * 100:.4f}% of compile_model)"
    )
    for key, ratios in pair_ratios.items():
        a, b = key.split("/")
        overall = statistics.median(times[a]) / statistics.median(times[b])
        print(
            f"{key}: ratio of medians {overall:.4f}; per-round geometric mean "
            f"{statistics.geometric_mean(ratios):.4f} (range {min(ratios):.4f}-{max(ratios):.4f})"
        )


if __name__ == "__main__":
    main()
