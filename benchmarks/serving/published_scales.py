"""The serving simulator at published scales: time to ready, cold-start TTFT and goodput per
compile policy on grids this machine cannot hold, from the compile costs their sources report.

Each scenario is a grid and a cost model on the simulator's virtual clock (nothing compiles,
the figures are exact for the model and the seeded trace, whatever the host). Compile costs
come from the sources named; step times, lengths and rates are stated assumptions (ASSUMED),
the same for every policy, so the comparison is between policies, not a claim about hardware.
Each rate is about half of what the warm engine's largest bucket sustains under its step time.

    python benchmarks/serving/published_scales.py [--minutes 20] [--cold-minutes 2]
        [--seed 0] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.results import write_result

from compile_ahead.runtime.serving.buckets import Grid
from compile_ahead.runtime.serving.engine import ServingEngine, replay
from compile_ahead.runtime.serving.metrics import Slo, first_minutes, request_metrics
from compile_ahead.runtime.serving.policies import POLICIES, make_policy
from compile_ahead.runtime.serving.simulator import CostModel, Linear, SimExecutor
from compile_ahead.runtime.serving.workloads import Arrivals, Lengths, generate_requests

GIB = 2**30
ASSUMED = "assumed: the same for every policy"


@dataclass(frozen=True)
class Scenario:
    name: str
    grid: Grid
    costs: CostModel
    rate: float  # requests per second
    prompt: Lengths
    output: Lengths
    slo: Slo
    source: str


def _vllm_sizes() -> tuple[int, ...]:
    """vLLM's default CUDA graph capture sizes: 1, 2, 4, then every multiple of 8 to 512."""
    return (1, 2, 4, *range(8, 513, 8))


SCENARIOS = (
    Scenario(
        "vllm-67-sizes",
        Grid(_vllm_sizes(), (8192,)),  # paged attention: one graph per batch size
        CostModel(
            compile_s=Linear(base=60 / 67),  # ~60 s of capture over 67 sizes
            step_s=Linear(base=0.025, per_batch=1e-4),  # ASSUMED
            bucket_bytes=Linear(base=64 * 2**20),
        ),
        rate=8.0,
        prompt=Lengths("lognormal", 512, 0.8, cap=4096),
        output=Lengths("lognormal", 256, 0.8, cap=4000),
        slo=Slo(ttft_s=2.0, tpot_s=0.1),
        source="vLLM: 67 capture sizes by default; Llama-70B ~60 s of CUDA graph capture "
        "(vllm-project/vllm #19824; RFC #20098 lazy capture); torch.compile's ~70 s once "
        "left out (every policy pays it before its first graph)",
    ),
    Scenario(
        "gaudi-hour",
        Grid((1, 2, 4, 8, 16, 32, 64, 128), (1024, 2048, 4096, 8192, 16384)),
        CostModel(
            compile_s=Linear(base=3600 / 40),  # an hour of warm-up over 40 decode buckets
            step_s=Linear(base=0.04, per_batch=2e-4, per_slot=2e-9),  # ASSUMED
            bucket_bytes=Linear(base=256 * 2**20),
        ),
        rate=1.0,
        prompt=Lengths("lognormal", 2048, 0.8, cap=12000),
        output=Lengths("lognormal", 512, 0.8, cap=4000),
        slo=Slo(ttft_s=5.0, tpot_s=0.2),
        source="Gaudi vLLM warms one graph per bucket: DeepSeek-R1 at 128 concurrency and 16k "
        "context took about an hour (HabanaAI/vllm-fork PR #2082)",
    ),
    Scenario(
        "neuron-minutes",
        Grid((1, 2, 4, 8), (1024, 2048, 4096, 8192)),
        CostModel(
            compile_s=Linear(base=180.0),  # minutes per bucket
            step_s=Linear(base=0.03, per_batch=5e-4, per_slot=1e-9),  # ASSUMED
            bucket_bytes=Linear(base=GIB),
        ),
        rate=0.3,
        prompt=Lengths("lognormal", 512, 0.8, cap=6000),
        output=Lengths("lognormal", 256, 0.8, cap=2000),
        slo=Slo(ttft_s=5.0, tpot_s=0.2),
        source="AWS Neuron compiles one NEFF per bucket at start ('more buckets = longer "
        "startup', Neuron docs); minutes per bucket; most token-generation buckets unused "
        "(aws-neuron/nki-llama #30)",
    ),
    *(
        Scenario(
            f"npu-{where}",
            Grid((1, 2, 4), (1024, 2048, 4096)),
            CostModel(
                compile_s=Linear(base=30.0),  # ASSUMED: an NPU rung of a 0.5B model
                step_s=Linear(base=0.03, per_batch=0.004, per_slot=2e-9),  # ASSUMED
                bucket_bytes=Linear(base=GIB),
                background_step_factor=factor,
            ),
            rate=0.15,
            prompt=Lengths("lognormal", 256, 0.8, cap=3000),
            output=Lengths("lognormal", 256, 0.8, cap=1000),
            slo=Slo(ttft_s=3.0, tpot_s=0.1),
            source="OpenVINO NPUW compiles its context pyramid inside compile_model and takes "
            "batch 1; the decode runs on the NPU, so a background compile on the host "
            + ("does not slow it" if factor == 1 else "shares it on a two-core host (CPU)"),
        )
        for where, factor in (("own-silicon", 1.0), ("shared-cores", 2.0))
    ),
)


def run_scenario(s: Scenario, policy: str, args: argparse.Namespace) -> dict:
    count = max(1, int(s.rate * args.minutes * 60))
    top = s.grid.top_capacity
    trace = generate_requests(args.seed, count, Arrivals("poisson", s.rate), s.prompt,
                              s.output, 1000, max_slots=top)  # fmt: skip
    engine = ServingEngine(s.grid, make_policy(policy), SimExecutor(s.costs), slo=s.slo)
    replay(engine, trace)
    report = engine.report()
    cold = request_metrics(first_minutes(engine.lives.values(), args.cold_minutes * 60), s.slo)
    m, e = report["requests_metrics"], report["engine"]
    return {
        "time_to_ready_s": e["time_to_ready_s"],
        "cold_ttft_p99_s": cold["ttft_s"]["p99"],
        "cold_goodput_per_s": cold["goodput_per_s"],
        "ttft_p99_s": m["ttft_s"]["p99"],
        "tpot_p50_s": m["tpot_s"]["p50"],
        "goodput_per_s": m["goodput_per_s"],
        "compile_s": e["compile_s"],
        "buckets_compiled": len(e["buckets_compiled"]),
        "buckets_used": len(e["buckets_used"]),
        "grid_buckets": len(s.grid),
        "requests": m["requests"]["finished"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=20.0, help="trace length (default 20)")
    p.add_argument("--cold-minutes", type=float, default=2.0, help="cold start window")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS))
    p.add_argument("--json", type=Path, default=None, help="write the result file here")
    args = p.parse_args(argv)
    wanted = set(args.scenarios.split(","))
    results: dict[str, dict] = {}
    for s in (s for s in SCENARIOS if s.name in wanted):
        print(f"\n{s.name}: {len(s.grid)} buckets; {s.source}")
        results[s.name] = {"source": s.source, "policies": {}}
        for policy in POLICIES:
            r = run_scenario(s, policy, args)
            results[s.name]["policies"][policy] = r
            print(
                f"  {policy:9}  ready {r['time_to_ready_s']:8.1f} s  cold TTFT p99 "
                f"{_s(r['cold_ttft_p99_s'])}  goodput {_rate(r['goodput_per_s'])}/s "
                f"(cold {_rate(r['cold_goodput_per_s'])})  TPOT p50 {_s(r['tpot_p50_s'])}  "
                f"buckets {r['buckets_compiled']}/{r['grid_buckets']} compiled, "
                f"{r['buckets_used']} used"
            )
    if args.json is not None:
        print(f"result: {write_result(args.json, 'published_scales', results, args)}")
    return 0


def _s(v: float | None) -> str:
    return "       -" if v is None else f"{v:8.2f} s"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


if __name__ == "__main__":
    sys.exit(main())
