"""What a run uses when not told, chosen per device from paired measurement.

Graph mode (``--graph``) and compile placement (``--compile-placement``) are mechanisms the
runner offers; which one pays depends on the device, so each default names the measurement
behind it. A device nobody has measured gets the plain choice (whole graphs, in-process).
"""

from __future__ import annotations

from dataclasses import dataclass

from compile_ahead.runtime.compile.settings.modes import (
    DecodeCompile,
    GraphMode,
    PlacementKind,
    PrefillShape,
)

# CPU: whole. Split compiles a successor rung in ~0.06 s instead of seconds and holds one
# weight copy, but each split step makes 2N+1 infer calls. Paired on a qwen2.5-0.5b-shaped
# checkpoint (`ab schedule`, i2 whole vs split, 1K->2K, 1920 tokens, 3 AB/BA pairs): split
# held 0.63x the peak RSS but decoded ~18% slower and its foreground compile (every weight
# part) was 1.2x; on the 1K..8K protocol the per-token cost outweighs the compile it saves.
MEASURED_GRAPH = {"CPU": GraphMode.WHOLE}

# CPU: in-process. A worker process compiles at idle priority and hands back an exported blob,
# but the CPU plugin repacks the weights again when the blob is imported: on qwen2.5-0.5b
# shapes (benchmarks/compile/compile_placement.py) the import in the decoding process cost 1.3-2.0x
# the in-process compile, decode lost more in total, and the successor was ready 2-5x later.
# The worker is the mechanism for devices where importing is cheap next to compiling, and for
# isolating a compiler that crashes or hangs.
MEASURED_PLACEMENT = {"CPU": PlacementKind.IN_PROCESS}


def default_graph(device: str) -> GraphMode:
    return MEASURED_GRAPH.get(device.upper(), GraphMode.WHOLE)


def default_placement(device: str) -> PlacementKind:
    return MEASURED_PLACEMENT.get(device.upper(), PlacementKind.IN_PROCESS)


# Tokens per prefill call for each shape when not told (capped at the first rung), whichever
# chose the shape: static 256 (a static chunk attends over the whole rung, and its last chunk is
# padded), dynamic 1024 (beat 256 on a 3800-token prompt), paged 4096 (one call beat four of
# 1024 by about 4%).
PREFILL_CHUNKS = {PrefillShape.STATIC: 256, PrefillShape.DYNAMIC: 1024, PrefillShape.PAGED: 4096}


@dataclass(frozen=True)
class PrefillDefault:
    """How a prompt is prefilled when not told: a prompt shorter than ``min_prompt`` goes
    token by token through the first rung's decode graph (no prefill graph to compile), a
    longer one through a prefill graph of ``shape`` taking its chunk of tokens per call."""

    shape: PrefillShape
    min_prompt: int

    @property
    def chunk(self) -> int:
        return PREFILL_CHUNKS[self.shape]


# CPU: the paged prefill graph (graphs/ir/paged_prefill.py: the model in the paged-attention form
# LLMPipeline runs), from 32 prompt tokens on. Paired against LLMPipeline's warm time to first
# token on the same IRs (qwen2.5-0.5b shapes, FP16/INT8/INT4, C=4096, 3800 prompt tokens;
# benchmarks/peers/first_token_vs_genai.py --prefill-shapes dynamic): paged 0.99-1.03x, the dynamic
# graph 1.37-1.46x (the CPU plugin runs a stateless graph's SDPA decomposed into matrix
# products), the static 256-token graph over the whole capacity 1.70x. The stateful model
# itself, with its K/V read back from state, was 2.97x on an avx512_bf16 CPU without AMX (a
# bf16 cache there takes the stateful SDPA's slow kernel). Below 32 prompt tokens the prompt
# goes token by token through the first rung's decode graph, which then serves from the first
# token on. At 16 prompt tokens (bf16 qwen2.5-0.5b checkpoint, b0 C=1024, 400 decoded, 6
# fresh-process pairs of `compile-ahead run --prompt-len 16` with `--prefill-chunk 1` and with
# `--prefill-chunk 16 --prefill-shape paged`) the paged graph gave the first token sooner
# (0.83-0.96 vs 1.06-1.19 s: it compiles faster than the decode graph, which then compiles after
# the first token) but left the stream paused for that compile (0.7 s) and the whole run 1.02x
# longer: a steady stream from the first token is the better trade for a prompt this short.
# Other devices (NPU): static shapes only, the static chunked graph over the first rung.
MEASURED_PREFILL = {"CPU": PrefillDefault(PrefillShape.PAGED, 32)}
STATIC_PREFILL = PrefillDefault(PrefillShape.STATIC, 32)


def default_prefill(device: str) -> PrefillDefault:
    return MEASURED_PREFILL.get(device.upper(), STATIC_PREFILL)


# CPU: after prefill. Prefill and compile_model share the CPU's cores, and a compile beside the
# inference threads slows the prefill more than the compile it hides. Cold start to the first token
# with a 3800-token prompt on the paged prefill graph (qwen2.5-0.5b shapes, optimum IRs
# FP16/INT8/INT4, 2 vCPU, 3 interleaved rounds; benchmarks/peers/first_token_vs_genai.py
# --cold-timings during-prefill), ours / LLMPipeline: after prefill 1.02x/1.03x/1.04x, during
# prefill 1.70x/1.52x/1.57x (the prefill ran 1.6-1.8x slower), and the decode graph was ready later
# too. Starting the decode graph beside the prefill graph's compile (with-prefill-graph) has it
# ready sooner but still slows the prefill: with a bf16 qwen2.5-0.5b checkpoint (i2,
# benchmarks/first_token/decode_compile_timings.py) the first token came 0.37 s later for 128 prompt
# tokens and 0.52 s later for 3800, the decode graph 0.32 s and 0.16 s sooner. Compiling it at
# Linux's idle thread priority (SCHED_IDLE) does not avoid this on the optimum IRs (the first token
# up to 1.14x LLMPipeline's, the decode graph ready later than after prefill): a thread's priority
# does not reach the plugin's shared worker threads, which run much of the compile. The first token
# comes first. A device that prefills on its own silicon (NPU) compiles on the host meanwhile.
MEASURED_DECODE_COMPILE = {"CPU": DecodeCompile.AFTER_PREFILL}


def default_decode_compile(device: str) -> DecodeCompile:
    return MEASURED_DECODE_COMPILE.get(device.upper(), DecodeCompile.DURING_PREFILL)


# Compile properties for decode graphs (one token per call) when not told, per device; a
# property the user gives wins. CPU: SNIPPETS_MODE=DISABLE, the plugin's switch for its
# snippets code generator (chains of element-wise ops fused into one generated kernel). It is
# accepted by compile_model though SUPPORTED_PROPERTIES does not list it, so it is probed before
# use (options.py) and a release that refuses it compiles with its default. Paired in fresh
# processes on qwen2.5-0.5b shapes (4 rounds; optimum IRs FP16/INT8/INT4 and a bf16
# checkpoint; C=1024 decode graph): compile_model 0.91x/0.88x/0.90x/0.77x with it. Decode, each
# arm in its own process (the graph a process compiles first decodes slower, so two graphs in
# one process do not compare), `compile-ahead run --schedule b0 --ladder 1024 --prompt-len 16
# --decode-tokens 400` with and without `--ov-config SNIPPETS_MODE=ENABLE`, 6 alternating
# pairs: per token 0.96x (bf16 checkpoint) and 0.97x (FP16 IR) with it (a decode step's
# element-wise work is vectors of one token; the generated kernels save nothing there and
# generating them costs compile time). Prefill graphs keep the default: with it the INT8 paged
# prefill of 1000 tokens ran 1.05-1.09x slower. So do split graphs (rung_builder.py).
MEASURED_DECODE_PROPERTIES = {"CPU": {"SNIPPETS_MODE": "DISABLE"}}


def decode_properties(device: str) -> dict[str, str]:
    return dict(MEASURED_DECODE_PROPERTIES.get(device.upper(), {}))
