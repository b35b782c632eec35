"""The schedules side by side on one model, in one process, run order rotated per repetition.

Prints the seed's tables from the run reports:
  1. copy-and-grow (i1) vs direct (b0): tok/s per context range, migration per boundary and per
     decoded token, average reserved KV (seed: 0.68x of b0, 0.13 ms migration per token);
  2. i1 vs i2: foreground compile, critical path, decode, waits (targets: i2 foreground
     <= 1.1x the first rung's compile and <= 0.35x i1's; zero waits; decode within 10% of i1);
  3. i3 vs i2 and b0: committed KV average vs b0's reserved (target <= 0.55x), bytes copied,
     per-token latency vs i2 (target within 3%).

    python benchmarks/decode/ladder_schedules.py --ladder scaled --prompt-len 32 [--reps 1]
    python benchmarks/decode/ladder_schedules.py --ladder default            # the seed's 1K..8K
"""

from __future__ import annotations

import argparse
import gc
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import median
from _shared.results import write_result

from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.ladder.reporting.run_report import RunResult
from compile_ahead.runtime.ladder.runner import run_ladder
from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import RunConfig
from compile_ahead.runtime.ladder.settings.run_protocol import teacher_forced
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.sources.base import ModelSource
from compile_ahead.runtime.sources.resolve import resolve_model

MIB = 2**20


def range_rates(run: RunResult, ladder: Ladder) -> list[float | None]:
    """tok/s over each context range [0, C1), [C1, C2), ... from per-step times."""
    edges = (0, *ladder.rungs)
    rates = []
    for lo, hi in itertools.pairwise(edges):
        ns = [d for d, c in zip(run.step_ns, run.step_context, strict=True) if lo <= c < hi]
        rates.append(len(ns) / (sum(ns) / 1e9) if ns else None)
    return rates


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--ladder", default="scaled")
    ap.add_argument("--prompt-len", type=int, default=None, help="default: first rung / 8")
    ap.add_argument("--decode-tokens", type=int, default=None, help="default: up to the top")
    ap.add_argument("--schedules", default="b0,b1,i1,i2,i3")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--prefill-chunk", type=int, default=1)
    ap.add_argument("--graph", choices=("whole", "split"), default="whole")
    ap.add_argument("--json", type=Path, default=None, help="also write every report here")
    return ap.parse_args()


@dataclass
class Runs:
    """Every schedule's runs on one ladder, and their medians."""

    ladder: Ladder
    tokens: int  # decoded tokens per run
    by_schedule: dict[str, list[RunResult]]

    def has(self, *names: str) -> bool:
        return set(names) <= set(self.by_schedule)

    def reports(self, name: str) -> list[dict]:
        """The schedule's run reports, as their JSON."""
        return [x.report.to_json() for x in self.by_schedule[name]]

    def rep(self, name: str, key: str) -> float:
        return median([r[key] for r in self.reports(name)])

    def rates(self, name: str) -> np.ndarray:
        """Median tok/s per context range over the schedule's repetitions."""
        runs = self.by_schedule[name]
        per_run = np.array([range_rates(x, self.ladder) for x in runs], dtype=float)
        return np.nanmedian(per_run, axis=0)

    def ranges(self) -> list[str]:
        return [f"{lo}-{hi}" for lo, hi in itertools.pairwise((0, *self.ladder.rungs))]


def run_schedules(source: ModelSource, settings: dict[str, RunConfig], reps: int) -> dict:
    """Each schedule's runs, ``reps`` times, the order rotated each repetition."""
    names = list(settings)
    runs: dict[str, list[RunResult]] = {n: [] for n in names}
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            result = run_ladder(source, settings[name])
            if result.error is not None:
                raise SystemExit(f"{name} failed: {result.error}")
            runs[name].append(result)
            r = result.report.to_json()
            print(
                f"  rep {rep} {name}: fg compile {r['foreground_compile_s']:.2f} s, critical "
                f"{r['critical_path_s']:.2f} s, decode {r['decode_s']:.2f} s",
                flush=True,
            )
            gc.collect()
    return runs


def copy_and_grow(runs: Runs) -> None:
    """i1 against a graph of the top capacity from the start (b0)."""
    print("\n1. copy-and-grow (i1) vs direct top-capacity graph (b0)")
    print(f"{'context':>12} {'i1 tok/s':>10} {'b0 tok/s':>10} {'delta':>8}")
    for label, a, b in zip(runs.ranges(), runs.rates("i1"), runs.rates("b0"), strict=True):
        print(f"{label:>12} {a:10.2f} {b:10.2f} {100 * (a / b - 1):+7.1f}%")
    i1 = runs.reports("i1")
    for k, bd in enumerate(i1[0]["boundaries"]):
        mig = median([x["boundaries"][k]["migration_s"] for x in i1])
        print(
            f"  boundary {bd['from']}->{bd['to']}: migration {mig * 1e3:.1f} ms, "
            f"{bd['bytes_copied'] / MIB:.1f} MiB copied"
        )
    total_mig = median([sum(b["migration_s"] for b in x["boundaries"]) for x in i1])
    print(f"  migration per decoded token: {total_mig / runs.tokens * 1e3:.4f} ms (seed 0.1295)")
    i1_kv, b0_kv = runs.rep("i1", "kv_reserved_avg_bytes"), runs.rep("b0", "kv_reserved_avg_bytes")
    print(
        f"  average reserved KV i1/b0: {i1_kv / b0_kv:.3f}x "
        f"({i1_kv / MIB:.1f} vs {b0_kv / MIB:.1f} MiB; seed 0.68x)"
    )


def eager_vs_jit(runs: Runs) -> None:
    """i1 against the one-ahead JIT (i2)."""
    print("\n2. eager (i1) vs one-ahead JIT (i2)")
    for key in ("foreground_compile_s", "critical_path_s", "decode_s"):
        a, b = runs.rep("i1", key), runs.rep("i2", key)
        print(f"  {key:<22} i1 {a:8.2f} s  i2 {b:8.2f} s  ratio {b / a:.3f}")
    i2 = runs.reports("i2")
    # What must exist before the first token: the first rung (and split's weight parts).
    first = median([x["first_rung_compile_s"] + x["weights_compile_s"] for x in i2])
    foreground = runs.rep("i2", "foreground_compile_s")
    print(f"  i2 foreground / first-rung compile: {foreground / first:.3f} (target <= 1.1)")
    waits = [b["wait_s"] for x in i2 for b in x["boundaries"]]
    ready = sum(b["ready"] for x in i2 for b in x["boundaries"])
    print(f"  boundary waits: {ready}/{len(waits)} ready, total wait {sum(waits):.2f} s")


def reserve_and_commit(runs: Runs) -> None:
    """i3's committed memory and latency against i2 and b0."""
    print("\n3. reserve-and-commit (i3)")
    ratio = runs.rep("i3", "kv_committed_avg_bytes") / runs.rep("b0", "kv_reserved_avg_bytes")
    print(f"  committed KV avg i3 / reserved KV avg b0: {ratio:.3f}x (target <= 0.55)")
    i3 = runs.reports("i3")
    copied = sum(b["bytes_copied"] for x in i3 for b in x["boundaries"])
    print(f"  bytes copied at boundaries: {copied}")
    for label, a, b in zip(runs.ranges(), runs.rates("i3"), runs.rates("i2"), strict=True):
        print(f"  {label:>12}: per-token latency i3/i2 {b / a:.3f}x")


def main() -> None:
    args = parse_args()
    source = resolve_model(args.model)
    for name in source.weights.names():  # synthetic weights are made lazily: not in a run
        source.weights.get(name)
    ladder = Ladder.parse(args.ladder)
    prompt_len = args.prompt_len or ladder.rungs[0] // 8
    tokens = args.decode_tokens or ladder.top - prompt_len
    proto = teacher_forced(source.config.vocab_size, prompt_len, tokens)
    options = CompileOptions("CPU").resolved()
    print(
        f"model: {source.label}\nladder {list(ladder.rungs)}, prompt {prompt_len}, "
        f"{tokens} teacher-forced decode tokens, CPU {options.inference_precision}, "
        f"{args.graph} graphs"
    )
    settings = {
        name: RunConfig(
            SCHEDULES[name], ladder, proto, prefill_chunk=args.prefill_chunk, graph=args.graph,
            options=options,
        )
        for name in args.schedules.split(",")
    }  # fmt: skip
    runs = Runs(ladder, tokens, run_schedules(source, settings, args.reps))
    if args.json:
        reports = {n: [x.report.to_json() for x in v] for n, v in runs.by_schedule.items()}
        write_result(args.json, "ladder_schedules", reports, args)
    if runs.has("b0", "i1"):
        copy_and_grow(runs)
    if runs.has("i1", "i2"):
        eager_vs_jit(runs)
    if runs.has("i3", "i2", "b0"):
        reserve_and_commit(runs)


if __name__ == "__main__":
    main()
