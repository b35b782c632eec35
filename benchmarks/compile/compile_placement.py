"""Compile placement: a successor compiled in this process against one compiled by a
low-priority worker process and imported here.

Prints, measured side by side:
  - what a successor costs the decoding process: in-process compile (build + compile_model)
    against the worker's import (read + import_model), and the worker's own compile, warm
    (persistent worker) and cold (a fresh worker per compile), interleaved;
  - decode per-token latency on the C=--rung graph while its successor (C=2x) compiles
    in-process (a background thread) or in the worker, against the same graph decoding with
    nothing compiling; rounds in alternating order, ratios per round.

    python benchmarks/compile/compile_placement.py --model /path/to/checkpoint [--rounds 2]
        [--priority idle|nice|normal] [--rung 1024] [--skip-cost]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openvino as ov

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import orders

from compile_ahead.runtime.base.precision import OV_TYPES, STORAGE_DTYPES
from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.compile.worker.client import CompileWorker
from compile_ahead.runtime.graphs.spec import GraphSpec, past_key_name, past_value_name
from compile_ahead.runtime.graphs.step import CompiledStep
from compile_ahead.runtime.sources.base import ModelSource
from compile_ahead.runtime.sources.resolve import resolve_model

PAST = 512  # context length the decode steps run at (any value below the rung)


def bind_zero_kv(step: CompiledStep, source: ModelSource, kv: str) -> list[np.ndarray]:
    """Zero KV buffers bound to the step's past inputs (latency does not depend on values)."""
    cfg = source.config
    shape = (1, cfg.num_kv_heads, step.spec.capacity, cfg.head_dim)
    keep = []
    for i in range(cfg.num_layers):
        for name in (past_key_name(i), past_value_name(i)):
            buf = np.zeros(shape, STORAGE_DTYPES[kv])
            keep.append(buf)
            step.request.set_tensor(name, ov.Tensor(buf, list(shape), OV_TYPES[kv]))
    return keep


def decode_while(step: CompiledStep, background: Callable[[], object] | None, idle_tokens: int):
    """Per-token latencies (s) while ``background`` runs on a thread (or for idle_tokens)."""
    ids = np.array([7], np.int64)
    out: list[float] = []
    ends: list[int] = []  # monotonic ns at each step's end
    done = threading.Event()
    result: dict[str, object] = {}

    def run() -> None:
        t0 = time.monotonic()
        try:
            result["value"] = background()  # type: ignore[misc]
        finally:
            result["wall_s"] = time.monotonic() - t0
            done.set()

    if background is not None:
        threading.Thread(target=run, daemon=True).start()
    while (background is not None and not done.is_set()) or (
        background is None and len(out) < idle_tokens
    ):
        t0 = time.perf_counter()
        step.run(ids, PAST)
        out.append(time.perf_counter() - t0)
        ends.append(time.monotonic_ns())
    result["ends"] = ends
    return out, result


def ms(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1e3:.1f} ms, mean {statistics.fmean(xs) * 1e3:.1f} ms"


@dataclass(frozen=True)
class Bench:
    """What every arm compiles: the model, the options, the successor's shape, the worker."""

    source: ModelSource
    options: CompileOptions
    successor: GraphSpec
    worker: CompileWorker
    priority: str
    timeout: float


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="checkpoint directory (or preset)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rung", type=int, default=1024)
    ap.add_argument("--priority", default="idle", choices=("idle", "nice", "normal"))
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--skip-cost", action="store_true", help="only the decode-while-compiling part")
    return ap.parse_args()


def cost_arm(bench: Bench, arm: str, rows: dict[str, list[float]]) -> None:
    """One successor compile of ``arm`` (in process, the warm worker, a fresh worker)."""
    source, successor, options = bench.source, bench.successor, bench.options
    if arm == "inproc":
        res = compile_step(source, successor, options)
        rows["inproc"].append(res.build_s + res.compile_s)
        print(f"  in-process build+compile {res.build_s + res.compile_s:.2f} s")
    elif arm == "worker":
        w = bench.worker.compile(source.reopen(), successor, options, timeout_s=bench.timeout)
        rows["warm"].append(w.build_s + w.compile_s)
        rows["import"].append(w.import_s)
        print(
            f"  worker (warm) build+compile {w.build_s + w.compile_s:.2f} s, "
            f"export {w.export_s:.2f} s, blob {w.blob_bytes / 2**20:.0f} MiB, "
            f"import here {w.import_s:.2f} s"
        )
    else:
        with CompileWorker(priority=bench.priority, persistent=False) as fresh:
            t0 = time.monotonic()
            c = fresh.compile(source.reopen(), successor, options, timeout_s=bench.timeout)
            total = time.monotonic() - t0
        rows["cold"].append(total - c.import_s)
        print(
            f"  fresh worker: start {c.spawn_s:.2f} s + resolve {c.resolve_s:.2f} s "
            f"+ build+compile {c.build_s + c.compile_s:.2f} s + export "
            f"{c.export_s:.2f} s (to blob on disk {total - c.import_s:.2f} s)"
        )


def successor_cost(bench: Bench, rounds: int) -> None:
    """What a successor costs the decoding process, the arms interleaved."""
    print("\n== successor cost, no decode running ==")
    rows: dict[str, list[float]] = {k: [] for k in ("inproc", "import", "warm", "cold")}
    for _, order in orders(("inproc", "worker", "cold"), rounds):
        for arm in order:
            cost_arm(bench, arm, rows)
    med = {k: statistics.median(v) if v else float("nan") for k, v in rows.items()}
    print(
        f"  import / in-process compile: {med['import'] / med['inproc']:.3f} "
        f"({med['import']:.2f} vs {med['inproc']:.2f} s, medians)"
    )
    print(
        f"  fresh worker to blob / warm worker compile: {med['cold'] / med['warm']:.2f} "
        f"({med['cold']:.2f} vs {med['warm']:.2f} s)"
    )


def compile_job(bench: Bench, arm: str) -> Callable[[], object]:
    """The successor's compile as ``arm`` runs it, for ``decode_while``'s thread."""
    if arm == "inproc":
        return lambda: compile_step(bench.source, bench.successor, bench.options).step
    return lambda: bench.worker.compile(
        bench.source.reopen(), bench.successor, bench.options, timeout_s=bench.timeout
    )


def worker_split(lat: list[float], res: dict[str, object], base: list[float]) -> str:
    """Tokens while the worker compiled against tokens while this process imported."""
    w = res["value"]
    imp = next(ph for ph in w.phases if ph.name == "import_model")  # type: ignore[attr-defined]
    ends: list[int] = res["ends"]  # type: ignore[assignment]
    during = [x for x, e in zip(lat, ends, strict=True) if e <= imp.begin_ns]
    importing = [x for x, e in zip(lat, ends, strict=True) if e > imp.begin_ns]
    idle = statistics.fmean(base)
    return (
        f"; worker compile+export {len(during)} tokens, mean / idle "
        f"{statistics.fmean(during) / idle if during else float('nan'):.3f}, "
        f"import here {len(importing)} tokens, mean / idle "
        f"{statistics.fmean(importing) / idle if importing else float('nan'):.3f}"
    )


def decode_during_compile(bench: Bench, current: CompiledStep, rung: int, rounds: int) -> None:
    """Decode latency on ``current`` while the successor compiles, per arm and round."""
    print(f"\n== decode at C={rung} while C={rung * 2} compiles ==")
    ratios: dict[str, list[float]] = {"inproc": [], "worker": []}
    walls: dict[str, list[float]] = {"inproc": [], "worker": []}
    for r, order in orders(("inproc", "worker"), rounds):
        base, _ = decode_while(current, None, 40)
        for arm in order:
            lat, res = decode_while(current, compile_job(bench, arm), 0)
            wall = float(res["wall_s"])  # type: ignore[arg-type]
            split = worker_split(lat, res, base) if arm == "worker" else ""
            del res
            ratio = statistics.fmean(lat) / statistics.fmean(base)
            extra = sum(lat) - len(lat) * statistics.fmean(base)  # decode time lost
            ratios[arm].append(ratio)
            walls[arm].append(wall)
            print(
                f"  round {r + 1} {arm:7s}: successor ready in {wall:.2f} s, {len(lat)} tokens "
                f"({ms(lat)}), mean / idle {ratio:.3f} (idle {ms(base)}), "
                f"decode time lost {extra:.2f} s{split}"
            )
    print_decode_summary(ratios, walls)


def print_decode_summary(ratios: dict[str, list[float]], walls: dict[str, list[float]]) -> None:
    for arm in ("inproc", "worker"):
        print(
            f"  {arm}: decode mean during the compile / idle, per round "
            f"{', '.join(f'{x:.3f}' for x in ratios[arm])}; successor ready in "
            f"{', '.join(f'{x:.1f}' for x in walls[arm])} s"
        )
    w_over_i = [w / i for w, i in zip(ratios["worker"], ratios["inproc"], strict=True)]
    t_over_i = [w / i for w, i in zip(walls["worker"], walls["inproc"], strict=True)]
    print(
        "  worker / in-process: decode slowdown ratio "
        f"{', '.join(f'{x:.3f}' for x in w_over_i)}; time to ready "
        f"{', '.join(f'{x:.2f}' for x in t_over_i)}"
    )


def main() -> None:
    args = parse_args()
    source = resolve_model(args.model)
    options = CompileOptions("CPU").resolved()
    kv = options.kv_precision
    assert kv is not None
    print(f"model {source.label}; precision {options.inference_precision}, KV {kv}")
    current = compile_step(source, GraphSpec(args.rung, 1, kv), options).step
    keep = bind_zero_kv(current, source, kv)
    with CompileWorker(priority=args.priority) as worker:
        t0 = time.monotonic()
        worker.start()
        print(f"worker start (python + openvino + Core): {time.monotonic() - t0:.2f} s")
        successor = GraphSpec(args.rung * 2, 1, kv)
        bench = Bench(source, options, successor, worker, args.priority, args.timeout)
        successor_cost(bench, 0 if args.skip_cost else args.rounds)
        decode_during_compile(bench, current, args.rung, args.rounds)
    del keep


if __name__ == "__main__":
    main()
