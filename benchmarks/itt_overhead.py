"""Cost of the ITT collector on compile_model, measured interleaved in fresh processes.

The collector must be announced before libopenvino loads, so every sample is its own process:
"on" imports compile_ahead normally (collector bound), "off" sets COMPILE_AHEAD_ITT=0 first.
Rounds alternate the order (on/off, off/on, ...) so drift on a shared machine hits both sides.
Each process builds the graph once, compiles it once to warm up, then times --compiles more.

    python benchmarks/itt_overhead.py --model tiny --rounds 6
    python benchmarks/itt_overhead.py --model qwen2.5-0.5b --capacity 1024 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = """
import json, sys, time
import compile_ahead
from compile_ahead.runtime import graphs
from compile_ahead.runtime.compiler import CompileOptions, core, device_config
from compile_ahead.runtime.sources import resolve_model

model, capacity, compiles = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
source = resolve_model(model)
options = CompileOptions(device="CPU").resolved()
spec = graphs.GraphSpec(capacity=capacity, chunk=1, kv_precision=options.kv_precision)
ov_model = graphs.build_step_model(source.config, source.weights, spec)
config = device_config(options)
times = []
for i in range(compiles + 1):
    t0 = time.perf_counter()
    compiled = core().compile_model(ov_model, "CPU", config)
    elapsed = time.perf_counter() - t0
    del compiled
    if i:
        times.append(elapsed)
bound, events = [], 0
try:
    from compile_ahead import _itt
    bound, events = _itt.bound_libraries(), _itt.stats()["recorded"]
except ImportError:
    pass
print(json.dumps({"times": times, "bound": len(bound), "events": events}))
"""


def run_child(on: bool, args: argparse.Namespace) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "INTEL_LIBITTNOTIFY64"}
    if not on:
        env["COMPILE_AHEAD_ITT"] = "0"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, args.model, str(args.capacity), str(args.compiles)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"child failed:\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if on and not result["bound"]:
        sys.exit("the collector did not bind in the 'on' process: the comparison would be void")
    if not on and result["bound"]:
        sys.exit("the collector bound in the 'off' process: the comparison would be void")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--capacity", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=6, help="on/off process pairs")
    p.add_argument("--compiles", type=int, default=3, help="timed compiles per process")
    args = p.parse_args()

    on_times: list[float] = []
    off_times: list[float] = []
    pair_ratios: list[float] = []
    events = 0
    t_start = time.monotonic()
    for r in range(args.rounds):
        order = (True, False) if r % 2 == 0 else (False, True)
        medians = {}
        for on in order:
            res = run_child(on, args)
            (on_times if on else off_times).extend(res["times"])
            medians[on] = statistics.median(res["times"])
            events = max(events, res["events"])
        pair_ratios.append(medians[True] / medians[False])
        print(
            f"round {r + 1}: on {medians[True] * 1e3:.1f} ms, off {medians[False] * 1e3:.1f} ms, "
            f"ratio {pair_ratios[-1]:.4f}",
            flush=True,
        )
    ratio = statistics.median(on_times) / statistics.median(off_times)
    geo = statistics.geometric_mean(pair_ratios)
    print(
        f"\nmodel {args.model}, C={args.capacity}: {args.rounds} interleaved process pairs x "
        f"{args.compiles} compiles, {time.monotonic() - t_start:.0f} s"
    )
    print(
        f"compile_model median: on {statistics.median(on_times) * 1e3:.1f} ms, "
        f"off {statistics.median(off_times) * 1e3:.1f} ms"
    )
    print(f"overhead ratio (median on / median off): {ratio:.4f}")
    print(
        f"geometric mean of per-pair ratios: {geo:.4f} "
        f"(range {min(pair_ratios):.4f}-{max(pair_ratios):.4f}); "
        f"events recorded per 'on' process: up to {events}"
    )


if __name__ == "__main__":
    main()
