"""`compile-ahead ab serve`: serving compile policies paired over one trace, each trial a fresh
`compile-ahead serve` process (profiling/trials/serve_kind/). Every input is checked here,
once, before the results directory is made: the policies, the grid, the trace (a request file
read as the trials read it, or the generator's values), the model or cost model, the flags."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from compile_ahead.commands.options import (
    add_model_options,
    add_ov_config_options,
    add_synthetic_dtype_option,
    compile_options,
    count,
    model_inputs,
    resolve_from_args,
    seconds,
)
from compile_ahead.commands.serve import add_prefill_chunk_option
from compile_ahead.errors import CompileAheadError
from compile_ahead.output.checks import check_new_dir, check_not_inputs

if TYPE_CHECKING:
    from compile_ahead.profiling.trials.serve_kind.run import ServeTrials

GENERATOR_FLAGS = ("seed", "count", "rate", "arrivals", "cv", "prompt_lengths", "output_lengths")
SIMULATED_VOCAB = 1000  # a cost model computes no tokens: generated ids only need to be ids


def register(kinds: argparse._SubParsersAction, common: Callable) -> None:
    """`ab serve`; ``common`` adds the flags every `ab` kind shares (pairs, out, ...)."""
    s = kinds.add_parser(
        "serve",
        help="serving compile policies (up-front, on-demand, ahead) over one trace",
        description="Each trial replays the same trace with `compile-ahead serve --policy P` "
        "in a fresh process; the first policy is the control. The trace is --requests FILE, "
        "or generated from --seed, --count, --rate and the length distributions.",
    )
    add_model_options(s, cache=False)
    add_synthetic_dtype_option(s)
    add_ov_config_options(s)
    s.add_argument(
        "--arms", required=True, help="policies, comma-separated; the first is the control"
    )
    _trace_options(s)
    _serve_options(s)
    common(s, pairs=5)
    s.set_defaults(func=run_serve_ab)


def _trace_options(s: argparse.ArgumentParser) -> None:
    """The trace: a request file, or the generator's values."""
    s.add_argument("--requests", type=Path, metavar="FILE", help="a JSONL request file to replay")
    g = s.add_argument_group("a generated trace (instead of --requests)")
    g.add_argument("--seed", type=count(0), help="the generator's seed (default 0)")
    g.add_argument("--count", type=count(1), help="requests (default 20)")
    g.add_argument("--rate", type=float, help="arrivals per second (default 2)")
    g.add_argument("--arrivals", choices=("poisson", "gamma"), help="(default poisson)")
    g.add_argument("--cv", type=float, help="gamma: the gaps' coefficient of variation (default 2)")
    g.add_argument(
        "--prompt-lengths",
        metavar="KIND:A[:B]",
        help="fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA tokens "
        "(default uniform:4:C/4, C the top capacity)",
    )
    g.add_argument(
        "--output-lengths",
        metavar="KIND:A[:B]",
        help="likewise (default uniform:8:C/2; cut so prompt + output fits C)",
    )


def _serve_options(s: argparse.ArgumentParser) -> None:
    """The grid and what every trial's `serve` is told besides its policy."""
    s.add_argument("--buckets", default="1,2,4", help="batch sizes (default 1,2,4)")
    s.add_argument("--ladder", default="scaled", help="capacities (default scaled)")
    s.add_argument("--memory-budget", type=float, default=None, metavar="GIB")
    s.add_argument("--kv", default="reserve", help="reserve or copy (default reserve)")
    add_prefill_chunk_option(s)
    s.add_argument("--stop-at-eos", action="store_true")
    s.add_argument(
        "--goodput",
        nargs="+",
        default=[],
        metavar="KEY:MS",
        help="SLOs for goodput: ttft, tpot, e2el in ms",
    )
    s.add_argument(
        "--cold-s",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="also pair the TTFT p99 of the requests arriving in the first SECONDS",
    )
    s.add_argument(
        "--simulate",
        type=Path,
        metavar="COSTS",
        help="trials on the simulator's cost model (virtual clock, nothing compiles)",
    )
    s.add_argument(
        "--trial-traces",
        action="store_true",
        help="each trial also writes its Perfetto trace (linked from the compare page)",
    )


def run_serve_ab(args: argparse.Namespace) -> int:
    from compile_ahead.commands.ab_options import design_from_args
    from compile_ahead.profiling.trials.serve_kind.experiment import parse_arms
    from compile_ahead.profiling.trials.serve_kind.run import run_serve_experiment

    policies = parse_arms(args.arms)
    out = _out_dir(args)
    trials = serve_trials(args, policies)
    return run_serve_experiment(trials, design_from_args(args), out)


def _inputs(args: argparse.Namespace) -> list[Path]:
    return [*model_inputs(args), *(p for p in (args.requests, args.simulate) if p)]


def _out_dir(args: argparse.Namespace) -> Path:
    """A new (or empty) results directory, never over an input, checked before any work."""
    out = args.out
    if out is None:
        out = Path("ab-results") / f"serve-{time.strftime('%Y%m%d-%H%M%S')}"
    check_new_dir(out, "--out")
    check_not_inputs({"--out": out}, _inputs(args))
    return out


def serve_trials(args: argparse.Namespace, policies: tuple[str, ...]) -> ServeTrials:
    """The trials' grid, trace and `serve` flags, each checked once here."""
    from compile_ahead.commands.serve import (
        KV_MODES,
        check_prefill_chunk,
        memory_budget,
        parse_goodput,
    )
    from compile_ahead.profiling.trials.serve_kind.run import ServeTrials
    from compile_ahead.runtime.ladder.settings.capacities import Ladder
    from compile_ahead.runtime.serving.buckets import Grid, parse_sizes

    grid = Grid.of(parse_sizes(args.buckets, "--buckets"), Ladder.parse(args.ladder).rungs)
    if args.kv not in KV_MODES:
        raise CompileAheadError(f"--kv {args.kv!r}: one of {', '.join(KV_MODES)}")
    parse_goodput(args.goodput)
    check_prefill_chunk(args)
    budget = memory_budget(args)
    generated = [f for f in GENERATOR_FLAGS if getattr(args, f) is not None]
    if args.requests is not None and generated:
        named = ", ".join("--" + f.replace("_", "-") for f in generated)
        raise CompileAheadError(f"--requests replays a file; {named} generate a trace: give one")
    flags = ["--device", args.device, "--no-cache", "--kv", args.kv]
    for flag, value in (
        ("--inference-precision", args.inference_precision),
        ("--kv-precision", args.kv_precision),
        ("--synthetic-dtype", args.synthetic_dtype),
        ("--ov-config-file", args.ov_config_file),
        ("--memory-budget", None if budget is None else repr(args.memory_budget)),
        ("--prefill-chunk", args.prefill_chunk),
        ("--simulate", args.simulate),
    ):
        if value is not None:
            flags += [flag, str(value)]
    flags += [part for prop in args.ov_config for part in ("--ov-config", prop)]
    flags += ["--stop-at-eos"] if args.stop_at_eos else []
    flags += ["--goodput", *args.goodput] if args.goodput else []
    text, source_text, n, spec = _trace(args, grid.top_capacity)
    model = None if args.simulate is not None else args.model
    return ServeTrials(
        policies, model, grid.batch_sizes, grid.capacities, text, source_text, n, spec,
        tuple(flags), args.cold_s, args.trial_traces,
    )  # fmt: skip


def _trace(args: argparse.Namespace, top: int) -> tuple[bytes, str, int, dict | None]:
    """The trace's text, where it came from, its request count and the generator's values;
    read and checked with the model's vocabulary (and tokenizer) as every trial will."""
    from compile_ahead.commands.serve import prompt_tokenizer
    from compile_ahead.output.input_files import read_input_text
    from compile_ahead.runtime.serving.workloads import (
        MAX_REQUEST_FILE_BYTES,
        Arrivals,
        read_requests,
        requests_jsonl,
    )

    if args.simulate is not None:
        from compile_ahead.runtime.serving.simulator import read_cost_model

        read_cost_model(args.simulate)
        source, vocab = None, SIMULATED_VOCAB
    else:
        compile_options(args)  # the device and --ov-config, refused before the model loads
        source = resolve_from_args(args)
        vocab = source.config.vocab_size
    if args.requests is not None:
        text = read_input_text(args.requests, f"--requests {args.requests}", MAX_REQUEST_FILE_BYTES)
        requests = read_requests(args.requests, 2**31 - 1 if source is None else vocab,
                                 prompt_tokenizer(source))  # fmt: skip
        return text.encode(), f"--requests {args.requests}", len(requests), None
    from compile_ahead.profiling.trials.serve_kind import workload as w

    def pick(value: object, default: object) -> object:
        return default if value is None else value

    arrivals = Arrivals(pick(args.arrivals, "poisson"), pick(args.rate, 2.0), pick(args.cv, 2.0))  # type: ignore[arg-type]
    prompt = w.default_prompt_lengths(top)
    output = w.default_output_lengths(top)
    if args.prompt_lengths is not None:
        prompt = w.parse_lengths(args.prompt_lengths, "--prompt-lengths")
    if args.output_lengths is not None:
        output = w.parse_lengths(args.output_lengths, "--output-lengths")
    spec = w.GeneratedTrace(pick(args.seed, 0), pick(args.count, 20), arrivals, prompt, output)  # type: ignore[arg-type]
    requests = spec.requests(vocab, top)
    return requests_jsonl(requests).encode(), spec.describe(), len(requests), spec.to_json()
