"""Decode per step of our [B, C] rung graph cut from an optimum-intel IR against openvino-genai's
LLMPipeline batched greedy generate on the same IR, per weight format, B in {1, 2, 4, 8}.

Both arms live in one process and are timed in interleaved rounds (the order of the B values
and of the two arms rotates by round, as the project's trial design orders arms), so machine
drift hits every arm alike. The model a process compiles first decodes slower for as long as
the process lives (peers/decode_vs_genai.py measured it), so each format runs in two fresh
processes, one building our graphs first and one LLMPipeline first, half the rounds each; the
ratio is over all rounds, each order's printed beside it.

- ours: the decode graph of capacity C (default 1024) at batch B, bound to a KV arena of B
  sequences; a step is one call (B tokens in) plus writing each sequence's new K/V row, the
  way the ladder runner steps a batch (runtime/ladder/runner.py);
- LLMPipeline: ``generate`` on B prompts of ``--prompt`` tokens ([B, T] ids and mask), fresh
  random ones each call so no prefix cache serves it; its step is the interval between two
  steps' tokens as the pipeline records it (perf_metrics raw m_durations).

Prints per format and B: our compile time ([B, C] against [1, C]), both step medians and
ours / LLMPipeline (paired rounds, geometric mean), then the aggregate tokens/s at the largest
B over B=1, ours beside the peer's. Both sides take the device defaults.

    python benchmarks/batching/batch_vs_genai.py [--workdir DIR] [--formats fp16,int8,int4]
        [--ir DIR ...] [--capacity 1024] [--batches 1,2,4,8] [--prompt 128] [--steps 16]
        [--rounds 4]

Without ``--ir`` the IRs are random-weight qwen2.5-0.5b exports made in ``--workdir`` (reused
when there); ``--ir`` names exports to use instead (each labelled by its folder name).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import openvino as ov

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import fresh_json, median, orders, ratio
from _shared.models import FORMATS, prepare

from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.model.kv_arena import KVArena
from compile_ahead.runtime.sources.resolve import resolve_model

ARMS = ("ours", "genai")
ORDERS = ARMS  # which arm a worker process builds first


class OursAt:
    """Our [B, C] decode graph cut from the IR, bound to B sequences of ``context`` slots."""

    def __init__(self, source, batch: int, capacity: int, options: CompileOptions, context: int):
        kv = options.kv_precision
        assert kv is not None
        result = compile_step(source, GraphSpec(capacity, 1, kv, batch=batch), options)
        self.batch, self.compile_s, self.step = batch, result.compile_s, result.step
        # Attention cost does not depend on the values: the arena's zeros stand in for a history.
        self.arena = KVArena(source.config, capacity, kv, batch)
        self.step.bind(self.arena)
        self.layers = source.config.num_layers
        self.context = context
        self.rows = np.arange(batch)

    def step_s(self, steps: int) -> float:
        """Median seconds per step over ``steps`` steps from ``context`` filled slots."""
        times = []
        ids = np.full(self.batch, 11, np.int64)
        for i in range(steps):
            past = self.context + i
            t0 = time.perf_counter()
            if self.batch == 1:
                out = self.step.run(ids, past)
                for layer in range(self.layers):
                    self.arena.write(layer, past, out.new_keys[layer], out.new_values[layer])
                ids[0] = int(np.argmax(out.logits))
            else:
                slots = np.full(self.batch, past, np.int64)
                out = self.step.run(ids, slots)
                for layer in range(self.layers):
                    k, v = out.new_keys[layer], out.new_values[layer]
                    self.arena.write_rows(layer, self.rows, slots, k, v)
                ids[:] = np.argmax(out.logits, axis=-1)
            times.append(time.perf_counter() - t0)
        return median(times)


class GenaiBatch:
    """LLMPipeline on the IR, batched greedy generate."""

    def __init__(self, model_dir: Path, vocab: int):
        import openvino_genai as genai

        self.genai = genai
        self.pipe = genai.LLMPipeline(str(model_dir), "CPU")
        self.vocab = vocab
        self.rng = np.random.default_rng(100)
        self.generate(1, 8, 1)  # warm: a dynamic-shape model repacks on its first inference

    def generate(self, batch: int, prompt: int, new_tokens: int):
        cfg = self.genai.GenerationConfig()
        cfg.max_new_tokens = new_tokens
        cfg.do_sample = False
        cfg.ignore_eos = True
        cfg.eos_token_id = 0
        cfg.stop_token_ids = set()
        ids = self.rng.integers(100, self.vocab - 100, (batch, prompt)).astype(np.int64)
        inputs = self.genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
        return self.pipe.generate(inputs, cfg)

    def step_s(self, batch: int, prompt: int, steps: int) -> float:
        """Median seconds per decode step at batch B, from the pipeline's own record: its raw
        ``m_durations`` hold, per step, the interval since the previous step's tokens shared
        out over the B tokens (B equal entries), so a step is one entry times B."""
        raw = self.generate(batch, prompt, 1 + steps).perf_metrics.raw_metrics
        per_token = list(raw.m_durations)[::batch]  # one entry per step, in microseconds
        return median([d * batch / 1e6 for d in per_token])


def _models(args: argparse.Namespace) -> dict[str, Path]:
    if args.ir:
        return {Path(p).name: Path(p) for p in args.ir}
    return prepare(args.workdir, tuple(args.formats.split(",")))


def worker(model_dir: Path, args: argparse.Namespace, batches: list[int], first: str) -> dict:
    """Every B of one model in this process, ``first`` built first (the model a process
    compiles first decodes slower for as long as it lives): our compile seconds per B and
    each arm's per-round step seconds per B."""
    options = CompileOptions().resolved()
    source = resolve_model(str(model_dir))

    def make_ours() -> dict[int, OursAt]:
        return {b: OursAt(source, b, args.capacity, options, args.prompt) for b in batches}

    if first == "ours":
        ours = make_ours()
        genai = GenaiBatch(model_dir, source.config.vocab_size)
    else:
        genai = GenaiBatch(model_dir, source.config.vocab_size)
        ours = make_ours()
    steps: dict[str, dict[int, list[float]]] = {arm: {b: [] for b in batches} for arm in ARMS}
    for r, order in orders(batches, args.rounds):
        for b in order:
            ours[b].step_s(1)  # one warm step after the other arms ran
            for arm in ARMS[r % 2 :] + ARMS[: r % 2]:
                if arm == "ours":
                    value = ours[b].step_s(args.steps)
                else:
                    value = genai.step_s(b, args.prompt, args.steps)
                steps[arm][b].append(value)
    return {"compile_s": {b: ours[b].compile_s for b in batches}, "steps": steps}


def _measure(args, dirs, batches):
    """Per (model, B): our compile seconds (median over the processes), and each arm's
    per-round step seconds with the order each round's process built the arms in."""
    compile_s: dict[tuple[str, int], float] = {}
    steps: dict[tuple[str, str, int], list[tuple[str, float]]] = {}
    half = max(1, args.rounds // 2)
    for label, model_dir in dirs.items():
        results = {first: run_worker(model_dir, args, first, half) for first in ORDERS}
        for b in batches:
            compile_s[(label, b)] = median([r["compile_s"][str(b)] for r in results.values()])
            for arm in ARMS:
                steps[(label, arm, b)] = [
                    (first, v) for first, r in results.items() for v in r["steps"][arm][str(b)]
                ]
        print(f"{label}: measured ({half} rounds in each of {len(ORDERS)} processes)", flush=True)
    return compile_s, steps


def run_worker(model_dir: Path, args: argparse.Namespace, first: str, rounds: int) -> dict:
    command = [
        sys.executable, __file__, "--worker", str(model_dir), "--first", first,
        "--rounds", str(rounds), "--capacity", str(args.capacity), "--batches", args.batches,
        "--prompt", str(args.prompt), "--steps", str(args.steps),
    ]  # fmt: skip
    return fresh_json(command)


def _values(steps: list[tuple[str, float]], first: str | None = None) -> list[float]:
    return [v for f, v in steps if first is None or f == first]


def _print_model(label: str, model_dir: Path, batches: list[int], compile_s, steps) -> None:
    print(f"{label}: {resolve_model(str(model_dir)).weight_format.summary}")
    first, last = batches[0], batches[-1]
    for b in batches:
        ours, theirs = steps[(label, "ours", b)], steps[(label, "genai", b)]
        by_order = ", ".join(
            f"{f} built first {ratio(_values(theirs, f), _values(ours, f)):.2f}x" for f in ORDERS
        )
        print(
            f"  B={b}: compile [B,C] {compile_s[(label, b)]:.2f} s "
            f"({compile_s[(label, b)] / compile_s[(label, first)]:.2f}x B={first}); "
            f"step ours {median(_values(ours)) * 1e3:.2f} ms, LLMPipeline "
            f"{median(_values(theirs)) * 1e3:.2f} ms, ratio "
            f"{ratio(_values(theirs), _values(ours)):.2f}x ({by_order})"
        )
    gain = {
        arm: (last / median(_values(steps[(label, arm, last)])))
        / (first / median(_values(steps[(label, arm, first)])))
        for arm in ARMS
    }
    print(
        f"  aggregate tokens/s B={last} over B={first}: ours {gain['ours']:.2f}x, "
        f"LLMPipeline {gain['genai']:.2f}x"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=Path("bench-out/batch-vs-genai"))
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--ir", action="append", help="an optimum-intel export to use (repeat)")
    p.add_argument("--capacity", type=int, default=1024)
    p.add_argument("--batches", default="1,2,4,8")
    p.add_argument("--prompt", type=int, default=128, help="prompt tokens (our filled slots)")
    p.add_argument("--steps", type=int, default=16, help="decode steps timed per round")
    p.add_argument("--rounds", type=int, default=4, help="split between the two build orders")
    p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--first", choices=ORDERS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args, batches, args.first)))
        return 0
    dirs = _models(args)
    options = CompileOptions().resolved()
    print(
        f"device CPU, inference {options.inference_precision}, our KV {options.kv_precision}, "
        f"C={args.capacity}, prompt {args.prompt}, {args.steps} steps x {args.rounds} rounds",
        flush=True,
    )
    compile_s, steps = _measure(args, dirs, batches)
    print("\nresults (medians; ratio = ours / LLMPipeline per step, paired rounds)")
    for label, model_dir in dirs.items():
        _print_model(label, model_dir, batches, compile_s, steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
