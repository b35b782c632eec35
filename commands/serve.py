"""`compile-ahead serve`: continuous batching on static [B, C] buckets, compiled by a policy.

With --requests it replays a request file in this process (on the device's wall clock, or on
the simulator's virtual clock with --simulate), writes the metrics report and prints a summary.
Without --requests it listens as an OpenAI-compatible HTTP endpoint (``listen`` below; the
server itself is commands/serve_listen.py's).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compile_ahead.commands.options import (
    add_model_options,
    add_ov_config_options,
    add_synthetic_dtype_option,
    compile_options,
    model_inputs,
    resolve_from_args,
)
from compile_ahead.commands.serve_listen import add_listen_options, check_mode_flags
from compile_ahead.errors import CompileAheadError
from compile_ahead.output.checks import check_distinct, check_output_file
from compile_ahead.output.inputs import check_not_inputs

if TYPE_CHECKING:
    from compile_ahead.runtime.serving.buckets import Grid
    from compile_ahead.runtime.serving.engine import ServingEngine
    from compile_ahead.runtime.serving.metrics import Slo
    from compile_ahead.runtime.serving.policies import CompilePolicy

KV_MODES = ("reserve", "copy")  # as runtime/serving/device_executor.py takes them
# device_executor.PREFILL_CHUNK, said here without importing OpenVINO (a test holds them equal)
DEFAULT_PREFILL_CHUNK = 128
GOODPUT_KEYS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2e_s"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve", help="serve requests with continuous batching on static buckets"
    )
    add_model_options(p)
    add_ov_config_options(p)
    add_synthetic_dtype_option(p)
    p.add_argument(
        "--requests",
        type=Path,
        metavar="FILE",
        help="a JSONL request file to replay (arrival_s, prompt_ids or prompt, max_new_tokens)",
    )
    p.add_argument(
        "--policy",
        default="ahead",
        help="when buckets compile: up-front, on-demand or ahead (default ahead)",
    )
    p.add_argument("--buckets", default="1,2,4", help="batch sizes (default 1,2,4)")
    p.add_argument(
        "--ladder",
        default="scaled",
        help="capacities: comma-separated, or default, scaled, tiny (default scaled)",
    )
    p.add_argument(
        "--memory-budget",
        type=float,
        default=None,
        metavar="GIB",
        help="GiB the compiled buckets may hold; least recently used ones are released beyond it",
    )
    p.add_argument(
        "--kv",
        default="reserve",
        help="reserve (one top reservation, rows read in place) or copy (default reserve)",
    )
    add_prefill_chunk_option(p)
    p.add_argument("--stop-at-eos", action="store_true", help="the model's EOS ends a request")
    p.add_argument(
        "--simulate",
        type=Path,
        metavar="COSTS",
        help="a cost model (JSON): run on the simulator's virtual clock, compiling nothing",
    )
    p.add_argument(
        "--goodput",
        nargs="+",
        default=[],
        metavar="KEY:MS",
        help="SLOs a request must meet to count toward goodput: ttft, tpot, e2el in ms",
    )
    add_output_options(p)
    add_listen_options(p)
    p.set_defaults(func=run)


def add_prefill_chunk_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prefill-chunk",
        type=int,
        default=None,
        metavar="N",
        help="tokens per call of the batch-1 prefill graph, capped at its capacity; a prompt "
        f"costs whole calls (default {DEFAULT_PREFILL_CHUNK})",
    )


def device_extras(args: argparse.Namespace, stop_at_eos: bool) -> dict[str, Any]:
    """What a device engine is told besides its grid and policy (ServingSettings'
    compile_options), its flags checked before."""
    extra = {"options": compile_options(args), "kv": args.kv, "stop_at_eos": stop_at_eos}
    if args.prefill_chunk is not None:
        extra["prefill_chunk"] = args.prefill_chunk
    return extra


def check_prefill_chunk(args: argparse.Namespace) -> None:
    """--prefill-chunk, when given: tokens >= 1, for a device (a cost model states its own)."""
    chunk = args.prefill_chunk
    if chunk is None:
        return
    if chunk < 1:
        raise CompileAheadError(f"--prefill-chunk {chunk}: a whole number of tokens >= 1")
    if getattr(args, "simulate", None) is not None:
        raise CompileAheadError(
            "--prefill-chunk is for a device; a cost model (--simulate) states its own "
            "prefill_chunk"
        )


def add_output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, help="write the metrics report (JSON) here")
    p.add_argument(
        "--trace",
        type=Path,
        help="write a Perfetto trace of the serving run here (listening: when the server stops, "
        "of the requests it still keeps)",
    )
    p.add_argument(
        "--costs-out",
        type=Path,
        metavar="FILE",
        help="write the simulator's cost model fitted from this replay on the device (JSON, "
        "for --simulate)",
    )


def listen(args: argparse.Namespace) -> int:
    """Serve HTTP requests: the engine on the device behind the OpenAI-compatible endpoint
    (commands/serve_listen.py). A request always stops at the model's EOS there."""
    from compile_ahead.commands.serve_listen import listen_http
    from compile_ahead.runtime.ladder.settings.capacities import Ladder
    from compile_ahead.runtime.serving.api import ServingSettings
    from compile_ahead.runtime.serving.buckets import Grid, parse_sizes
    from compile_ahead.runtime.serving.policies import make_policy

    check_outputs(args)  # --trace: written when the server stops
    check_prefill_chunk(args)
    policy = make_policy(args.policy)
    grid = Grid.of(parse_sizes(args.buckets, "--buckets"), Ladder.parse(args.ladder).rungs)
    extra = device_extras(args, stop_at_eos=True)
    settings = ServingSettings(
        grid.batch_sizes, grid.capacities, policy.name, memory_budget(args), extra
    )
    return listen_http(args, settings)


def memory_budget(args: argparse.Namespace) -> int | None:
    """--memory-budget in bytes (None: no budget)."""
    if args.memory_budget is None:
        return None
    if not args.memory_budget > 0 or args.memory_budget == float("inf"):
        raise CompileAheadError("--memory-budget must be a positive number of GiB")
    return int(args.memory_budget * 2**30)


def parse_goodput(items: list[str]) -> Slo:
    from compile_ahead.runtime.serving.metrics import Slo

    found: dict[str, float] = {}
    for item in items:
        key, _, ms = item.partition(":")
        if key not in GOODPUT_KEYS:
            raise CompileAheadError(f"--goodput {item!r}: the key is one of ttft, tpot, e2el")
        try:
            value = float(ms)
        except ValueError:
            value = -1.0
        if not value > 0 or value == float("inf"):
            raise CompileAheadError(f"--goodput {item!r}: give positive milliseconds, KEY:MS")
        found[GOODPUT_KEYS[key]] = value / 1000
    return Slo(**found)


def check_outputs(args: argparse.Namespace) -> None:
    """Outputs checked before any work, never over an input."""
    outputs = {"--out": args.out, "--trace": args.trace, "--costs-out": args.costs_out}
    for flag, path in outputs.items():
        if path is not None:
            check_output_file(path, flag)
    check_distinct(outputs)
    read = (args.requests, args.simulate, args.token_file)
    inputs = [*model_inputs(args), *(p for p in read if p)]
    check_not_inputs(outputs, inputs)


def run(args: argparse.Namespace) -> int:
    check_mode_flags(args)  # a replay's flags without --requests, or a server's with it
    if args.requests is None:
        return listen(args)
    from compile_ahead.runtime.ladder.settings.capacities import Ladder
    from compile_ahead.runtime.serving.buckets import Grid, parse_sizes
    from compile_ahead.runtime.serving.engine import replay
    from compile_ahead.runtime.serving.policies import make_policy
    from compile_ahead.runtime.serving.workloads import read_requests

    # Every input checked before anything compiles: each refusal is one line.
    check_outputs(args)
    if args.costs_out is not None and args.simulate is not None:
        raise CompileAheadError(
            "--costs-out fits a cost model from a run on the device; --simulate runs one"
        )
    if args.kv not in KV_MODES:
        raise CompileAheadError(f"--kv {args.kv!r}: one of {', '.join(KV_MODES)}")
    check_prefill_chunk(args)
    policy = make_policy(args.policy)
    slo = parse_goodput(args.goodput)
    budget = memory_budget(args)
    grid = Grid.of(parse_sizes(args.buckets, "--buckets"), Ladder.parse(args.ladder).rungs)
    source = None if args.simulate is not None else resolve_from_args(args)
    vocab = source.config.vocab_size if source is not None else 2**31 - 1
    requests = read_requests(args.requests, vocab, prompt_tokenizer(source))
    engine = _engine(args, grid, policy, budget, source)
    engine.slo = slo
    try:
        replay(engine, requests)
    finally:
        engine.executor.close()
    return _outputs(args, engine, source)


def _engine(
    args: argparse.Namespace, grid: Grid, policy: CompilePolicy, budget: int | None, source: Any
) -> ServingEngine:
    from compile_ahead.runtime.serving.api import ServingSettings
    from compile_ahead.runtime.serving.engine import ServingEngine
    from compile_ahead.runtime.serving.simulator import SimExecutor, read_cost_model

    if source is None:
        return ServingEngine(grid, policy, SimExecutor(read_cost_model(args.simulate)), budget)
    from compile_ahead.runtime.serving.device_executor import device_engine

    extra = device_extras(args, args.stop_at_eos)
    settings = ServingSettings(grid.batch_sizes, grid.capacities, policy.name, budget, extra)
    print(f"model: {source.label}")
    return device_engine(source, settings)


def _outputs(args: argparse.Namespace, engine: ServingEngine, source: Any) -> int:
    from compile_ahead.output.atomic import write_json_atomic

    report = engine.report()
    report["requests_file"] = str(args.requests)
    report["simulated"] = args.simulate is not None
    if source is not None:  # what served: the model, its weights synthetic or not, the device
        report |= {**source.describe(), "device": args.device}
    print(summary(report))  # first: a failed write must not hide what ran
    if args.out is not None:
        print(f"report: {write_json_atomic(args.out, report)}")
    if args.trace is not None:
        from compile_ahead.profiling.traces.serving import write_serving_trace

        print(f"trace: {write_serving_trace(args.trace, engine, engine.clock.now())}")
    if args.costs_out is not None:
        print(f"cost model: {write_json_atomic(args.costs_out, fitted_costs(report, engine))}")
    return 0


def fitted_costs(report: dict, engine: ServingEngine) -> dict:
    """The cost model fitted from this run on the device (its executor gives what a run cannot
    show)."""
    from compile_ahead.runtime.serving.calibration import fit_cost_model
    from compile_ahead.runtime.serving.device_executor import DeviceExecutor

    assert isinstance(engine.executor, DeviceExecutor)  # --simulate with --costs-out is refused
    return fit_cost_model([report], engine.executor.fixed_costs())


def prompt_tokenizer(source: Any) -> Any:
    """Text prompts' tokenizer: the model's, loaded only when a line has text."""
    if source is None or (source.model_dir is None and not source.has_tokenizer()):
        return None  # a GGUF has its own tokenizer without a model directory

    made: list[Any] = []  # built at the first text line, then kept (a GGUF's takes ~50 ms)

    def tokenize(text: str) -> list[int]:
        if not made:
            made.append(source.text_tokenizer())
        return list(made[0].encode(text).ids)

    return tokenize


def summary(report: dict) -> str:
    """A few lines a person reads: who was served, how fast, and what compiled where."""
    m, e = report["requests_metrics"], report["engine"]
    r = m["requests"]

    def ms(d: dict, key: str) -> str:
        return "-" if d[key] is None else f"{d[key] * 1000:.1f}"

    lines = [
        f"policy {report['policy']} on {report['grid']['batch_sizes']} x "
        f"{report['grid']['capacities']} ({e['clock']} clock)",
        f"requests: {r['finished']} finished, {r['refused']} refused of {r['total']}",
    ]
    for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        d = m[name]
        lines.append(
            f"{name[:-2].upper():5} ms: mean {ms(d, 'mean')}  p50 {ms(d, 'p50')}  "
            f"p90 {ms(d, 'p90')}  p99 {ms(d, 'p99')}"
        )
    rate = m["output_tokens_per_s"]
    lines.append(
        f"throughput: {m['request_throughput_per_s'] or 0:.3f} req/s, {rate or 0:.1f} tok/s, "
        f"goodput {m['goodput_per_s'] or 0:.3f} req/s"
    )
    c = e["compile_s"]
    ready = e["time_to_ready_s"]
    lines.append(
        f"time to ready {'-' if ready is None else f'{ready:.3f}'} s; compile s: "
        f"before serving {c['before_serving']:.2f}, request path {c['request_path']:.2f}, "
        f"background {c['background']:.2f} (waited {c['waited_for_background']:.2f})"
    )
    lines.append(
        f"buckets: {len(e['buckets_compiled'])} compiled, {len(e['buckets_used'])} used, "
        f"{len(e['buckets_released'])} released, {e['switches']} switches; "
        f"peak RSS {e['peak_rss_bytes'] / 2**20:.0f} MiB"
    )
    return "\n".join(lines)
