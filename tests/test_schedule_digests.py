"""Every schedule's logits and tokens on the tiny preset, pinned: a change to how a run is
configured, placed or compiled must not change a single bit of what it computes.

f32 inference precision makes the CPU plugin's results deterministic from run to run; the
digests are pinned per platform (the OpenVINO release, the CPU plugin's optimization
capabilities and its thread count), because another instruction set rounds differently.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from compile_ahead.runtime.ladder.runner import run_ladder
from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import RunConfig
from compile_ahead.runtime.ladder.settings.run_protocol import greedy, teacher_forced
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import F32, generate_on

LADDER = Ladder.parse("tiny")  # 16..128: four rungs, three boundaries
# A 40-token prompt goes through the CPU's paged prefill graph (whole graphs), then 80 steps
# cross every boundary; split graphs prefill it token by token.
PROMPT_LEN, DECODE_TOKENS = 40, 80
GREEDY_PROMPT = [5, 17, 301, 42, 7, 999, 64, 3]

# platform -> case -> (tokens digest, logits digest), as `python tests/test_schedule_digests.py`
# prints them.
PINNED: dict[str, dict[str, tuple[str, str]]] = {
    "2026.4.1-22982-e213a147257-releases/2026/4 "
    "[BF16,WINOGRAD,FP32,FP16,INT8,BIN,EXPORT_IMPORT] cpus=2": {
        "b0 whole teacher-forced": ("25a6ce3854f414f9", "46809483d2da379f"),
        "b0 split teacher-forced": ("25a6ce3854f414f9", "4baad2b93495211e"),
        "b0 whole greedy": ("e4f88d98b258f38e", "8a3cb2b011246bfe"),
        "b1 whole teacher-forced": ("25a6ce3854f414f9", "46809483d2da379f"),
        "b1 split teacher-forced": ("25a6ce3854f414f9", "4baad2b93495211e"),
        "b1 whole greedy": ("e4f88d98b258f38e", "8a3cb2b011246bfe"),
        "i1 whole teacher-forced": ("25a6ce3854f414f9", "46809483d2da379f"),
        "i1 split teacher-forced": ("25a6ce3854f414f9", "4baad2b93495211e"),
        "i1 whole greedy": ("e4f88d98b258f38e", "8a3cb2b011246bfe"),
        "i2 whole teacher-forced": ("25a6ce3854f414f9", "46809483d2da379f"),
        "i2 split teacher-forced": ("25a6ce3854f414f9", "4baad2b93495211e"),
        "i2 whole greedy": ("e4f88d98b258f38e", "8a3cb2b011246bfe"),
        "i3 whole teacher-forced": ("25a6ce3854f414f9", "46809483d2da379f"),
        "i3 split teacher-forced": ("25a6ce3854f414f9", "4baad2b93495211e"),
        "i3 whole greedy": ("e4f88d98b258f38e", "8a3cb2b011246bfe"),
        "i2 whole teacher-forced worker": ("25a6ce3854f414f9", "46809483d2da379f"),
        "generate token by token": ("444deaad05257fe1", "4a311f5447700d67"),
        "generate static prefill": ("444deaad05257fe1", "bc31f8cfe3c4c6c4"),
        "generate dynamic prefill": ("444deaad05257fe1", "76ac8135a4bf1121"),
        "generate paged prefill": ("444deaad05257fe1", "5a33c7d221cbec7c"),
        "generate paged prefill, decode during": ("444deaad05257fe1", "5a33c7d221cbec7c"),
        "generate paged prefill, decode beside": ("444deaad05257fe1", "5a33c7d221cbec7c"),
    },
}


def _platform() -> str:
    import openvino as ov

    from compile_ahead.runtime.base.ov_core import core

    capabilities = ",".join(core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    return f"{ov.get_version()} [{capabilities}] cpus={len(os.sched_getaffinity(0))}"


def _digest(tokens: list[int], logits: list[np.ndarray]) -> tuple[str, str]:
    tok = hashlib.sha256(np.asarray(tokens, np.int64).tobytes()).hexdigest()[:16]
    h = hashlib.sha256()
    for row in logits:
        h.update(np.ascontiguousarray(row, np.float32).tobytes())
    return tok, h.hexdigest()[:16]


def _ladder_run(
    source, schedule: str, graph: str, protocol, placement: str = "in-process"
) -> tuple[str, str]:
    settings = RunConfig(
        SCHEDULES[schedule],
        LADDER,
        protocol,
        graph=graph,
        keep_logits=True,
        placement=placement,
        options=F32,
    )
    result = run_ladder(source, settings)
    assert result.error is None and result.completed, result.error
    assert len(result.logits) == protocol.decode_tokens
    return _digest(result.predicted, result.logits)


def _generate(source, chunk: int, shape: str, timing: str | None) -> tuple[str, str]:
    kind = {"prefill_shape": shape} if chunk > 1 else {}
    result = generate_on(
        source, 64, GREEDY_PROMPT, 24, prefill_chunk=chunk, decode_compile=timing, **kind
    )
    assert len(result.tokens) == 24
    return _digest(result.tokens, result.logits)


def compute_digests() -> dict[str, tuple[str, str]]:
    source = resolve_model("tiny")
    vocab = source.config.vocab_size
    forced = teacher_forced(vocab, PROMPT_LEN, DECODE_TOKENS)
    prompted = greedy(GREEDY_PROMPT, 40)
    found = {}
    for schedule in SCHEDULES:
        for graph in ("whole", "split"):
            found[f"{schedule} {graph} teacher-forced"] = _ladder_run(
                source, schedule, graph, forced
            )
        found[f"{schedule} whole greedy"] = _ladder_run(source, schedule, "whole", prompted)
    # The successors compiled by a compile worker process and imported here.
    found["i2 whole teacher-forced worker"] = _ladder_run(source, "i2", "whole", forced, "worker")
    found["generate token by token"] = _generate(source, 1, "static", None)
    for shape in ("static", "dynamic", "paged"):
        found[f"generate {shape} prefill"] = _generate(source, 4, shape, "after-prefill")
    found["generate paged prefill, decode during"] = _generate(source, 4, "paged", "during-prefill")
    found["generate paged prefill, decode beside"] = _generate(
        source, 4, "paged", "with-prefill-graph"
    )
    return found


@pytest.fixture(scope="module")
def digests():
    return compute_digests()


def test_schedules_agree_with_each_other(digests):
    """Independent of the platform: every schedule computes the same thing on whole graphs,
    and on split graphs (tokens; split's logits differ from whole's in the last bits)."""
    for graph in ("whole", "split"):
        cases = {k: v for k, v in digests.items() if k.endswith(f"{graph} teacher-forced")}
        assert len({v for v in cases.values()}) == 1, cases
    tokens = {v[0] for k, v in digests.items() if k.endswith("teacher-forced")}
    assert len(tokens) == 1, digests


def test_digests_match_the_pinned_ones(digests):
    platform = _platform()
    pinned = PINNED.get(platform)
    if pinned is None:
        pytest.skip(
            f"digests are pinned for {sorted(PINNED)}; this platform is {platform} "
            "(another instruction set or thread count rounds differently)"
        )
    assert digests == pinned


if __name__ == "__main__":  # prints the entry to pin for this platform
    print(repr(_platform()), "{")
    for case, value in compute_digests().items():
        print(f"    {case!r}: {value!r},")
    print("}")
