"""The serving simulator checked against measured runs: measure here each bucket's compile,
its step time and the prefill per token, fit the cost model, then replay one seeded Poisson
trace on the device and in the simulator per policy, and print the simulated over measured
TTFT and TPOT p50/p99 (the target: within 15%).

Compiles are measured without the compile cache (every replay compiles as a cold server
does). Step time is measured with every row fed at half the capacity; the slowdown of a
step while a background compile runs is measured too (background_step_factor). Two cores
shared with other work bound every figure: run it on a quiet machine.

    python benchmarks/serving/sim_check.py --model qwen2.5-0.5b [--buckets 1,2,4]
        [--ladder 256,512,1024] [--requests 40] [--rate 0.5] [--policies ahead,on-demand]
        [--costs-out costs.json] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import median
from _shared.results import write_result

from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.serving.buckets import Bucket, Grid
from compile_ahead.runtime.serving.device_executor import DeviceExecutor, weight_bytes
from compile_ahead.runtime.serving.engine import ServingEngine, replay
from compile_ahead.runtime.serving.policies import make_policy
from compile_ahead.runtime.serving.simulator import CostModel, SimExecutor
from compile_ahead.runtime.serving.workloads import Arrivals, Lengths, generate_requests
from compile_ahead.runtime.sources.resolve import resolve_model

STEPS = 20  # timed decode steps per bucket


def measure(source, grid: Grid, options: CompileOptions) -> dict:
    """Compile seconds and median step seconds per bucket, prefill per token, and the step's
    slowdown while a compile runs beside it."""
    ex = DeviceExecutor(source, grid, options)
    compile_s, step_s = {}, {}
    try:
        for bucket in grid:
            compile_s[bucket] = ex.compile(bucket)
            step_s[bucket] = _step_time(ex, bucket)
        prompt_s = [(n, _prefill_time(ex, grid, n)) for n in _prompt_sizes(grid)]
        factor = _background_factor(source, grid, options, ex)
    finally:
        ex.close()
    (n0, t0), (n1, t1) = prompt_s[0], prompt_s[-1]
    per_token = max((t1 - t0) / (n1 - n0), 0.0) if n1 > n0 else 0.0
    return {
        "compile_s": compile_s,
        "step_s": step_s,
        "prefill_base_s": max(t0 - per_token * n0, 0.0),
        "prefill_per_token_s": per_token,
        "background_step_factor": factor,
        "bucket_bytes": ex.bucket_bytes(grid.smallest),
    }


def _step_time(ex: DeviceExecutor, bucket: Bucket) -> float:
    ex.activate(bucket, {}, {})
    feeds = {r: (1, bucket.capacity // 2) for r in range(bucket.batch)}
    times = []
    for _ in range(STEPS):
        t0 = time.perf_counter()
        ex.step(feeds)
        times.append(time.perf_counter() - t0)
    return median(times)


def _prompt_sizes(grid: Grid) -> list[int]:
    c = grid.capacities[0]
    return [max(1, c // 8), max(2, c // 2)]


def _prefill_time(ex: DeviceExecutor, grid: Grid, n: int) -> float:
    ex.activate(grid.smallest, {}, {})
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        ex.prefill(0, [1] * n)
        times.append(time.perf_counter() - t0)
    return median(times)


def _background_factor(source, grid: Grid, options, ex: DeviceExecutor) -> float:
    """Step time of the smallest bucket while another executor compiles the largest, over
    its step time alone."""
    alone = _step_time(ex, grid.smallest)
    other = DeviceExecutor(source, grid, options)
    worker = threading.Thread(target=other.compile, args=(grid.largest,))
    worker.start()
    busy = []
    while worker.is_alive():
        busy.append(_step_time(ex, grid.smallest))
    worker.join()
    other.close()
    return max(1.0, median(busy) / alone) if busy else 1.0


def cost_model(m: dict) -> CostModel:
    def table(values: dict) -> dict:
        return {"table": {f"{b}x{c}": v for (b, c), v in values.items()}}

    return CostModel.from_json(
        {
            "compile_s": table(m["compile_s"]),
            "step_s": table(m["step_s"]),
            "bucket_bytes": m["bucket_bytes"],
            "prefill_s": {"base": m["prefill_base_s"], "per_token": m["prefill_per_token_s"]},
            "background_step_factor": m["background_step_factor"],
        }
    )


def compare(args, source, grid: Grid, options, costs: CostModel) -> dict:
    top = grid.top_capacity
    trace = generate_requests(
        args.seed, args.requests, Arrivals("poisson", args.rate),
        Lengths("uniform", 4, top // 4), Lengths("uniform", 8, top // 2), source.config.vocab_size,
        max_slots=top,
    )  # fmt: skip
    out = {}
    for policy in args.policies.split(","):
        device = ServingEngine(grid, make_policy(policy), DeviceExecutor(source, grid, options))
        try:
            replay(device, trace)
        finally:
            device.executor.close()
        sim = ServingEngine(grid, make_policy(policy), SimExecutor(costs))
        replay(sim, trace)
        measured = device.report()["requests_metrics"]
        simulated = sim.report()["requests_metrics"]
        out[policy] = {
            f"{k}_{p}": _ratio(simulated[k][p], measured[k][p])
            for k in ("ttft_s", "tpot_s")
            for p in ("p50", "p99")
        }
        out[policy]["measured"] = {k: measured[k] for k in ("ttft_s", "tpot_s")}
        out[policy]["simulated"] = {k: simulated[k] for k in ("ttft_s", "tpot_s")}
        ratios = "  ".join(f"{k} {v:.2f}" for k, v in out[policy].items() if k[0] == "t")
        print(f"  {policy:9} simulated / measured: {ratios}", flush=True)
    return out


def _ratio(a: float | None, b: float | None) -> float:
    return a / b if a is not None and b else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--buckets", default="1,2,4")
    p.add_argument("--ladder", default="256,512,1024")
    p.add_argument("--inference-precision", default=None)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--rate", type=float, default=0.5, help="arrivals per second")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policies", default="ahead,on-demand,up-front")
    p.add_argument("--costs-out", type=Path, default=None, help="write the fitted cost model")
    p.add_argument("--json", type=Path, default=None, help="write the result file here")
    args = p.parse_args(argv)
    source = resolve_model(args.model)
    grid = Grid.of(_ints(args.buckets), _ints(args.ladder))
    options = CompileOptions("CPU", args.inference_precision).resolved()  # no compile cache
    print(f"{source.label}: weights {weight_bytes(source.config, 'f32') / 2**20:.0f} MiB at f32")
    m = measure(source, grid, options)
    costs = cost_model(m)
    plain = {k: v if not isinstance(v, dict) else {f"{b}x{c}": x for (b, c), x in v.items()}
             for k, v in m.items()}  # fmt: skip
    print(json.dumps(plain, indent=1))
    if args.costs_out is not None:
        args.costs_out.write_text(json.dumps(plain, indent=1))
    results = {"measured_costs": plain, "ratios": compare(args, source, grid, options, costs)}
    if args.json is not None:
        print(f"result: {write_result(args.json, 'sim_check', results, args)}")
    return 0


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


if __name__ == "__main__":
    sys.exit(main())
