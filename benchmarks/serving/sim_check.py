"""The serving simulator checked against measured runs: replay one seeded Poisson trace on the
device under every policy and fit the cost model from what those runs recorded
(runtime.serving.calibration); then replay another seed's trace on the device and in the
simulator per policy, and print the simulated over measured TTFT and TPOT p50/p99 (the
target: within 15%). With ``--replays N`` the check trace runs N times on the device and each
figure is held to the replays' median, their own spread printed beside it.

Every device replay is a fresh `compile-ahead serve` process (no compile cache), as a cold
server starts: no replay inherits another's process state. Two cores shared with other work
bound every figure: run it on a quiet machine.

    python benchmarks/serving/sim_check.py --model qwen2.5-0.5b [--buckets 1,2,4]
        [--ladder 256,512,1024] [--requests 40] [--rate 0.5] [--calibrate-seed 0] [--seed 1]
        [--policies ahead,on-demand,up-front] [--replays 1] [--costs-out costs.json] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import run_checked
from _shared.results import write_result

from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.serving.buckets import Grid
from compile_ahead.runtime.serving.calibration import fit_cost_model
from compile_ahead.runtime.serving.device_executor import DeviceExecutor, weight_bytes
from compile_ahead.runtime.serving.engine import ServingEngine, replay
from compile_ahead.runtime.serving.policies import make_policy
from compile_ahead.runtime.serving.requests import Request
from compile_ahead.runtime.serving.simulator import CostModel, SimExecutor
from compile_ahead.runtime.serving.workloads import (
    Arrivals,
    Lengths,
    generate_requests,
    write_requests,
)
from compile_ahead.runtime.sources.resolve import resolve_model

NAN = float("nan")
FIGURES = [(k, p) for k in ("ttft_s", "tpot_s") for p in ("p50", "p99")]  # simulated / measured


def trace(args, source, grid: Grid, seed: int) -> list[Request]:
    top = grid.top_capacity
    return generate_requests(
        seed, args.requests, Arrivals("poisson", args.rate),
        Lengths("uniform", 4, top // 4), Lengths("uniform", 8, top // 2), source.config.vocab_size,
        max_slots=top,
    )  # fmt: skip


def on_device(args, grid: Grid, policy: str, requests: list[Request]) -> dict:
    """A cold server's replay on the device, in a fresh `compile-ahead serve`: its report."""
    with tempfile.TemporaryDirectory() as work:
        trace_file, out = Path(work) / "trace.jsonl", Path(work) / "report.json"
        write_requests(requests, trace_file)
        cmd = [
            sys.executable, "-m", "compile_ahead.commands", "serve", "--model", args.model,
            "--requests", str(trace_file), "--policy", policy, "--no-cache",
            "--buckets", ",".join(map(str, grid.batch_sizes)),
            "--ladder", ",".join(map(str, grid.capacities)), "--out", str(out),
        ]  # fmt: skip
        if args.inference_precision is not None:
            cmd += ["--inference-precision", args.inference_precision]
        run_checked(cmd)
        return json.loads(out.read_text())


def simulated(grid: Grid, policy: str, costs: CostModel, requests: list[Request]) -> dict:
    engine = ServingEngine(grid, make_policy(policy), SimExecutor(costs))
    replay(engine, requests)
    return engine.report()


def calibrate(args, source, grid: Grid, options, policies: list[str]) -> dict:
    """The cost model fitted from every policy's replay of the calibration seed's trace."""
    requests = trace(args, source, grid, args.calibrate_seed)
    reports = []
    for policy in policies:
        print(f"  calibration replay: {policy} (seed {args.calibrate_seed})", flush=True)
        reports.append(on_device(args, grid, policy, requests))
        print(f"    compiles: {_compiles(reports[-1])}", flush=True)
    probe = DeviceExecutor(source, grid, options)  # compiles nothing: what runs cannot show
    try:
        fixed = probe.fixed_costs()
    finally:
        probe.close()
    return fit_cost_model(reports, fixed)


def compare(args, source, grid: Grid, costs: CostModel, policies: list[str]) -> dict:
    """The check trace replayed on the device ``--replays`` times per policy (the policies
    interleaved), and in the simulator once: simulated over the replays' median, and the
    replays' own spread (largest over smallest), the floor any model can be held to."""
    requests = trace(args, source, grid, args.seed)
    reports: dict[str, list[dict]] = {policy: [] for policy in policies}
    for replay_no in range(args.replays):
        for policy in policies:
            report = on_device(args, grid, policy, requests)
            reports[policy].append(report)
            print(f"  {policy:9} replay {replay_no + 1} compiles: {_compiles(report)}", flush=True)
    out = {}
    for policy in policies:
        runs = [r["requests_metrics"] for r in reports[policy]]
        sim = simulated(grid, policy, costs, requests)["requests_metrics"]
        row: dict = {}
        shown = []
        for k, p in FIGURES:
            values = [m[k][p] for m in runs if m[k][p] is not None]
            middle = statistics.median(values) if values else None
            ratio = row[f"{k}_{p}"] = _ratio(sim[k][p], middle)
            spread = row[f"{k}_{p}_spread"] = _ratio(max(values), min(values)) if values else NAN
            spread_text = f" (spread {spread:.2f})" if args.replays > 1 else ""
            shown.append(f"{k}_{p} {ratio:.2f}{spread_text}")
        row["measured"] = [{k: m[k] for k in ("ttft_s", "tpot_s")} for m in runs]
        row["simulated"] = {k: sim[k] for k in ("ttft_s", "tpot_s")}
        row["ready"] = ready = readiness(reports[policy][0], requests)
        out[policy] = row
        ratios = "  ".join(shown)
        print(f"  {policy:9} simulated / measured: {ratios}", flush=True)
        print(
            f"  {policy:9} time to ready {ready['time_to_ready_s']:.2f} s = "
            f"{ready['over_floor']:.2f}x (first arrival {ready['first_arrival_s']:.2f} s + "
            f"first compile {ready['first_compile_s']:.2f} s + first prefill "
            f"{ready['first_prefill_s']:.3f} s)",
            flush=True,
        )
    return out


def readiness(report: dict, requests: list[Request]) -> dict:
    """Time to ready against its floor: the first request's arrival, the smallest bucket's
    compile (the prefill graph's with it) and one prefill. Up-front compiles the whole grid
    first, so its first compile is not its floor's whole wait."""
    e = report["engine"]
    first = min(e["compiles"], key=lambda c: c["start_s"])
    arrival = min(r.arrival_s for r in requests)
    floor = max(arrival, first["start_s"] + first["seconds"]) + (e["first_prefill_s"] or 0.0)
    return {
        "time_to_ready_s": e["time_to_ready_s"],
        "first_arrival_s": arrival,
        "first_compile_s": first["seconds"],
        "first_prefill_s": e["first_prefill_s"],
        "over_floor": e["time_to_ready_s"] / floor if floor > 0 else float("nan"),
    }


def _compiles(report: dict) -> str:
    """Each compile of a run, in order: bucket, where, seconds."""
    return ", ".join(
        f"{b}x{c} {x['where']} {x['seconds']:.2f}s"
        + (f" (device busy {_beside(x)})" if x.get("busy_s") else "")
        for x in sorted(report["engine"]["compiles"], key=lambda x: x["start_s"])
        for b, c in [x["bucket"]]
    )


def _beside(compile_record: dict) -> str:
    """The share of a background compile the device worked beside it, per activity."""
    seconds = compile_record["seconds"]
    return ", ".join(f"{k} {v / seconds:.0%}" for k, v in compile_record["beside_s"].items())


def _ratio(a: float | None, b: float | None) -> float:
    return a / b if a is not None and b else NAN


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--buckets", default="1,2,4")
    p.add_argument("--ladder", default="256,512,1024")
    p.add_argument("--inference-precision", default=None)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--rate", type=float, default=0.5, help="arrivals per second")
    p.add_argument("--calibrate-seed", type=int, default=0, help="the trace the model is fitted on")
    p.add_argument("--seed", type=int, default=1, help="the trace it is checked on")
    p.add_argument("--policies", default="ahead,on-demand,up-front")
    p.add_argument(
        "--replays", type=int, default=1, help="device replays of the check trace per policy"
    )
    p.add_argument("--costs-out", type=Path, default=None, help="write the fitted cost model")
    p.add_argument("--json", type=Path, default=None, help="write the result file here")
    args = p.parse_args(argv)
    if args.replays < 1:
        p.error("--replays must be at least 1")
    if args.seed == args.calibrate_seed:
        p.error("--seed must differ from --calibrate-seed: the check is on a trace not fitted")
    source = resolve_model(args.model)
    grid = Grid.of(_ints(args.buckets), _ints(args.ladder))
    options = CompileOptions("CPU", args.inference_precision).resolved()  # no compile cache
    policies = args.policies.split(",")
    print(f"{source.label}: weights {weight_bytes(source.config, 'f32') / 2**20:.0f} MiB at f32")
    fitted = calibrate(args, source, grid, options, policies)
    print(json.dumps(fitted, indent=1))
    if args.costs_out is not None:
        args.costs_out.write_text(json.dumps(fitted, indent=1))
    costs = CostModel.from_json(fitted)
    ratios = compare(args, source, grid, costs, policies)
    results = {"fitted_costs": fitted, "ratios": ratios}
    if args.json is not None:
        print(f"result: {write_result(args.json, 'sim_check', results, args)}")
    return 0


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


if __name__ == "__main__":
    sys.exit(main())
