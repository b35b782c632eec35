"""Time to first token with a long prompt: ours against openvino-genai's LLMPipeline on the same
optimum-intel IR (random qwen2.5-0.5b weights exported FP16, INT8 and INT4 by ir_exports.py).

Two measurements per format, arms interleaved (AB/BA by round), ratios = ours / LLMPipeline:

- cold: a fresh process each, at the commands' defaults. Ours: `compile-ahead run --model IR
  --schedule b0 --ladder 4096 --prompt-ids <3800 ids> --max-new-tokens 2` with an empty compile
  cache directory (a first run), its report's first_token_s (the command's start to the first
  generated token: compile, prefill); LLMPipeline: construction plus a first generate of the
  same prompt (one new token), timed from before construction. Neither counts the Python and
  OpenVINO imports before that.
- warm prefill: one process, graphs compiled and the pipeline constructed once; each round a new
  3800-token prompt (LLMPipeline serves a repeated prompt's prefix from its cache). Ours: the
  default prefill path for the prompt (ladder/settings/prefill_plan.py choose_prefill) through
  prefill_chunks into a C=4096 KV store; LLMPipeline: its time to first token (perf metrics).

    python benchmarks/peers/first_token_vs_genai.py [--workdir DIR] [--formats fp16,int8,int4]
        [--rounds 3] [--prompt-len 3800]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import fresh_json, median, ratio_line, round_order
from _shared.genai_arms import build_arms, prompt_ids
from _shared.models import FORMATS, prepare

from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.settings.modes import DecodeCompile, choices
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.ladder.kv_store import make_store
from compile_ahead.runtime.ladder.prefill import prefill_chunks
from compile_ahead.runtime.ladder.settings.prefill_plan import choose_prefill
from compile_ahead.runtime.ladder.settings.schedules import KVPolicy
from compile_ahead.runtime.sources.resolve import resolve_model

CAPACITY = 4096

# LLMPipeline cold, in a fresh process: construction + first generate of the prompt (argv[2]).
GENAI_COLD = """
import sys, time
import numpy as np, openvino as ov, openvino_genai as genai
ids = np.asarray([[int(t) for t in open(sys.argv[2]).read().split(",")]], np.int64)
t0 = time.perf_counter()
pipe = genai.LLMPipeline(sys.argv[1], "CPU")
cfg = genai.GenerationConfig()
cfg.max_new_tokens = 1
cfg.ignore_eos = True
pipe.generate(genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), cfg)
print(time.perf_counter() - t0)
"""


def ours_cold(model_dir: Path, prompt_file: Path, extra: list[str]) -> dict:
    """`compile-ahead run` at its defaults (plus ``extra`` flags) in a fresh process, with an
    empty compile cache."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "run.json"
        cmd = [sys.executable, "-m", "compile_ahead.commands", "run", "--model", str(model_dir)]
        cmd += ["--schedule", "b0", "--ladder", str(CAPACITY), "--max-new-tokens", "2"]
        cmd += ["--prompt-ids", prompt_file.read_text(), "--no-progress"]
        cmd += ["--cache-dir", str(Path(tmp) / "cache"), "--report", str(report), *extra]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return json.loads(report.read_text())


def genai_cold(model_dir: Path, prompt_file: Path) -> float:
    return float(fresh_json([sys.executable, "-c", GENAI_COLD, str(model_dir), str(prompt_file)]))


class OursPrefill:
    """The default prefill graph for the prompt length, bound to a C=4096 KV store."""

    def __init__(
        self, model_dir: Path, options: CompileOptions, prompt_len: int, shape: str | None
    ):
        self.source = resolve_model(str(model_dir))
        kv = options.kv_precision
        assert kv is not None
        self.plan = choose_prefill(options.device, prompt_len, CAPACITY, shape=shape)
        self.step = compile_step(self.source, self.plan.spec(CAPACITY, kv), options).step
        self.options = options
        # Warm, as Genai's constructor leaves LLMPipeline: a dynamic-shape graph repacks its
        # weights on its first inference.
        self.prefill_s([11] * 8)

    def prefill_s(self, prompt: list[int]) -> float:
        kv = self.options.kv_precision
        assert kv is not None
        store = make_store(KVPolicy.SHARED_MAX, self.source.config, (CAPACITY,), kv, CAPACITY)
        self.step.bind(store.arena)
        t0 = time.perf_counter()
        prefill_chunks(self.step, prompt, store.sequence(0))
        return time.perf_counter() - t0


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, dict[str, list[str]]]:
    """The options, and the cold arms of ours: their names and extra `run` flags."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=Path("bench-out/ir-vs-genai"))
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prompt-len", type=int, default=3800)
    p.add_argument("--skip-cold", action="store_true")
    p.add_argument(
        "--cold-timings",
        default="",
        help="cold: also arms with these --decode-compile timings (e.g. after-prefill,"
        "during-prefill), interleaved with the defaults",
    )
    p.add_argument("--skip-warm", action="store_true")
    p.add_argument(
        "--prefill-shapes",
        default="",
        help="warm prefill: also these prefill graph shapes (e.g. static,dynamic,paged), "
        "interleaved with the default",
    )
    args = p.parse_args(argv)
    variants: dict[str, list[str]] = {"defaults": []}
    for timing in filter(None, args.cold_timings.split(",")):
        if timing not in choices(DecodeCompile):
            p.error(f"--cold-timings: {timing!r} is not one of {', '.join(choices(DecodeCompile))}")
        variants[timing] = ["--decode-compile", timing]
    return args, variants


@dataclass(frozen=True)
class Setup:
    """The IRs per weight format and what every arm shares."""

    formats: tuple[str, ...]
    dirs: dict[str, Path]
    options: CompileOptions
    vocab: int
    prompt_len: int
    rounds: int


@dataclass
class Cold:
    """Seconds to the first token in fresh processes, per format (and our variant)."""

    ours: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    genai: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    parts: dict[tuple[str, str], list[dict]] = field(default_factory=lambda: defaultdict(list))


@dataclass
class Warm:
    """Seconds of our prefill (per shape) and of LLMPipeline's first token, per format."""

    ours: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    genai: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


def cold_round(setup: Setup, variants: dict[str, list[str]], r: int, tmp: Path, cold: Cold) -> None:
    """Round ``r`` of the cold arms: every format, the arms in the round's order."""
    prompt_file = tmp / f"prompt{r}.txt"
    ids = prompt_ids(setup.prompt_len, setup.vocab, seed=300 + r)
    prompt_file.write_text(",".join(map(str, ids)))
    formats = setup.formats
    for fmt in formats[r % len(formats) :] + formats[: r % len(formats)]:
        for arm in round_order([*variants, "genai"], r):
            if arm not in variants:
                cold.genai[fmt].append(genai_cold(setup.dirs[fmt], prompt_file))
                continue
            rep = ours_cold(setup.dirs[fmt], prompt_file, variants[arm])
            cold.ours[(fmt, arm)].append(rep["first_token_s"])
            part = {k: rep[k] for k in ("startup_s", "first_token_compile_s", "prefill_s")}
            # the decode graph ready: first token plus the wait for it
            part["decode_ready_s"] = rep["first_token_s"] + rep["decode_graph_wait_s"]
            cold.parts[(fmt, arm)].append(part)


def run_cold(setup: Setup, variants: dict[str, list[str]]) -> Cold:
    cold = Cold()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(setup.rounds):
            cold_round(setup, variants, r, Path(tmp), cold)
            print(f"cold round {r + 1}/{setup.rounds} done", flush=True)
    return cold


def chosen_shape(shape: str) -> str | None:
    """A --prefill-shapes name as OursPrefill takes it (None: the device's default)."""
    return None if shape == "default" else shape


def run_warm(setup: Setup, shapes: list[str]) -> Warm:
    """Our prefill against LLMPipeline's time to first token, both built once per format."""
    warm = Warm()

    def our_prefills(model_dir: Path) -> dict[str, OursPrefill]:
        options, n = setup.options, setup.prompt_len
        return {s: OursPrefill(model_dir, options, n, chosen_shape(s)) for s in shapes}

    for fmt in setup.formats:
        ours, gen = build_arms(  # the arm built first alternates by format
            round_order(("ours", "genai"), setup.formats.index(fmt))[0] == "ours",
            partial(our_prefills, setup.dirs[fmt]),
            setup.dirs[fmt],
        )
        for r in range(setup.rounds):
            prompt = prompt_ids(setup.prompt_len, setup.vocab, seed=400 + r)
            arms: list[tuple[str, OursPrefill | None]] = [*ours.items(), ("genai", None)]
            for name, arm in round_order(arms, r):
                if arm is not None:
                    warm.ours[(fmt, name)].append(arm.prefill_s(prompt))
                else:
                    warm.genai[fmt].append(gen.run(prompt, 1)[0])
        del ours, gen
        gc.collect()
        print(f"warm {fmt} done", flush=True)
    return warm


def print_results(setup: Setup, variants: dict, cold: Cold, shapes: list[str], warm: Warm) -> None:
    print("\nresults (medians; ratio = ours / LLMPipeline)")
    for fmt in setup.formats:
        print(f"{fmt}: {resolve_model(str(setup.dirs[fmt])).weight_format.summary}")
        for arm in variants if cold.genai[fmt] else ():
            what = f"cold to first token ({arm})"
            print(ratio_line(what, cold.ours[(fmt, arm)], cold.genai[fmt], "s"))
            got = cold.parts[(fmt, arm)]
            mid = {k: median([p[k] for p in got]) for k in got[0]}
            print(
                f"    ours: startup {mid['startup_s']:.2f} s, compile/import "
                f"{mid['first_token_compile_s']:.2f} s, prefill {mid['prefill_s']:.2f} s; "
                f"decode graph ready at {mid['decode_ready_s']:.2f} s"
            )
        for shape in shapes if warm.genai[fmt] else ():
            what = f"prefill {setup.prompt_len} ({shape}) vs warm TTFT"
            print(ratio_line(what, warm.ours[(fmt, shape)], warm.genai[fmt], "s"))


def main(argv: list[str] | None = None) -> int:
    args, variants = parse_args(argv)
    formats = tuple(args.formats.split(","))
    dirs = prepare(args.workdir, formats)
    options = CompileOptions().resolved()
    vocab = resolve_model(str(dirs[formats[0]])).config.vocab_size
    setup = Setup(formats, dirs, options, vocab, args.prompt_len, args.rounds)
    plan = choose_prefill(options.device, args.prompt_len, CAPACITY)
    print(
        f"device {options.device}, inference {options.inference_precision}, our KV "
        f"{options.kv_precision}; prompt {args.prompt_len} tokens, our default prefill: "
        f"{plan.shape}, {plan.chunk} tokens per call; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    cold = Cold() if args.skip_cold else run_cold(setup, variants)
    shapes = ["default", *filter(None, args.prefill_shapes.split(","))]
    warm = Warm() if args.skip_warm else run_warm(setup, shapes)
    print_results(setup, variants, cold, shapes, warm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
