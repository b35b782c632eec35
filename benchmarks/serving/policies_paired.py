"""Compile policies paired over the same seeded traces: each pair is one seed's Poisson trace
served by every policy (on the device, each policy in a fresh engine, the order rotated by
pair as the project's trial design orders arms; or on the simulator with --simulate), and
each policy is compared with the control (the first) per endpoint: the geometric-mean ratio
with its 95% interval, the exact sign-flip p-value and the minimal detectable effect, as
`ab` reports them (profiling/trials/stats.py).

Endpoints: those of `ab serve` (profiling/trials/serve_kind/endpoints.py): time to ready,
TTFT p50/p99, TTFT p99 over the first --cold-minutes (cold start), TPOT p50, goodput under
--slo-ttft/--slo-tpot, output tokens/s, compile seconds on the request path, and peak RSS
(measured per engine on the device: the process's peak, so only the simulator's modelled
peak is per policy; `ab serve` runs each trial in a fresh process instead). On the
device the compile cache is off: every pair compiles as a cold server does.

    python benchmarks/serving/policies_paired.py --model qwen2.5-0.5b [--policies
        up-front,on-demand,ahead] [--buckets 1,2,4] [--ladder 256,512,1024] [--pairs 5]
        [--requests 40] [--rate 0.5] [--simulate COSTS.json] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import orders
from _shared.results import write_result

from compile_ahead.profiling.trials.analysis import Endpoint
from compile_ahead.profiling.trials.serve_kind import workload
from compile_ahead.profiling.trials.serve_kind.endpoints import report_values, serve_endpoints
from compile_ahead.profiling.trials.stats import paired_summary
from compile_ahead.runtime.serving.buckets import Grid
from compile_ahead.runtime.serving.engine import ServingEngine, replay
from compile_ahead.runtime.serving.metrics import Slo
from compile_ahead.runtime.serving.policies import make_policy
from compile_ahead.runtime.serving.workloads import Arrivals


def engine_for(args: argparse.Namespace, grid: Grid, policy: str, source) -> ServingEngine:
    slo = Slo(ttft_s=args.slo_ttft, tpot_s=args.slo_tpot)
    if args.simulate is not None:
        from compile_ahead.runtime.serving.simulator import SimExecutor, read_cost_model

        executor = SimExecutor(read_cost_model(args.simulate))
        return ServingEngine(grid, make_policy(policy), executor, slo=slo)
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.serving.device_executor import DeviceExecutor

    options = CompileOptions("CPU", args.inference_precision).resolved()  # no compile cache
    executor = DeviceExecutor(source, grid, options)
    return ServingEngine(grid, make_policy(policy), executor, slo=slo)


def one(
    args: argparse.Namespace, grid: Grid, policy: str, source, seed: int, eps: list[Endpoint]
) -> dict:
    """One policy on one seed's trace: its endpoints (those `ab serve` pairs)."""
    top = grid.top_capacity
    vocab = source.config.vocab_size if source is not None else 1000
    spec = workload.GeneratedTrace(
        seed, args.requests, Arrivals("poisson", args.rate),
        workload.default_prompt_lengths(top), workload.default_output_lengths(top),
    )  # fmt: skip
    engine = engine_for(args, grid, policy, source)
    try:
        replay(engine, spec.requests(vocab, top))
    finally:
        engine.executor.close()
    return report_values(engine.report(), eps)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny", help="the device's model (not with --simulate)")
    p.add_argument("--simulate", type=Path, default=None, help="a cost model: no device")
    p.add_argument("--policies", default="up-front,on-demand,ahead", help="the first: control")
    p.add_argument("--buckets", default="1,2,4")
    p.add_argument("--ladder", default="256,512,1024")
    p.add_argument("--inference-precision", default=None)
    p.add_argument("--pairs", type=int, default=5, help="seeds, one trace each")
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--rate", type=float, default=0.5)
    p.add_argument("--cold-minutes", type=float, default=2.0)
    p.add_argument("--slo-ttft", type=float, default=2.0, help="seconds")
    p.add_argument("--slo-tpot", type=float, default=0.2, help="seconds")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    policies = args.policies.split(",")
    grid = Grid.of(_ints(args.buckets), _ints(args.ladder))
    source = None
    if args.simulate is None:
        from compile_ahead.runtime.sources.resolve import resolve_model

        source = resolve_model(args.model)
    eps = serve_endpoints(cold_s=args.cold_minutes * 60)
    got: dict[str, list[dict]] = {policy: [] for policy in policies}
    for r, order in orders(policies, args.pairs):
        for policy in order:
            got[policy].append(one(args, grid, policy, source, r, eps))
        print(f"pair {r + 1}/{args.pairs} done", flush=True)
    results = compare(got, policies, eps)
    if args.json is not None:
        print(f"result: {write_result(args.json, 'policies_paired', results, args)}")
    return 0


def compare(got: dict[str, list[dict]], policies: list[str], eps: list[Endpoint]) -> dict:
    control, out = policies[0], {}
    print(f"\neach policy against {control} over {len(got[control])} paired traces")
    for policy in policies[1:]:
        out[policy] = {}
        for ep in eps:
            endpoint, better = ep.key, ep.better
            a = [x[endpoint] for x in got[control]]
            b = [x[endpoint] for x in got[policy]]
            if any(v is None for v in a + b):
                continue
            s = paired_summary(a, b, better=better)  # type: ignore[arg-type]
            out[policy][endpoint] = {
                "ratio": s.geomean_ratio, "ci": [s.ratio_ci_low, s.ratio_ci_high],
                "p": s.sign_flip_p, "mde_pct": s.mde_pct,
            }  # fmt: skip
            print(
                f"  {policy} / {control} {endpoint}: {_f(s.geomean_ratio)} "
                f"[{_f(s.ratio_ci_low)}, {_f(s.ratio_ci_high)}], p {s.sign_flip_p:.3f}, "
                f"MDE {_f(s.mde_pct)}%"
            )
    return {"pairs": got, "against_control": out}


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


if __name__ == "__main__":
    sys.exit(main())
