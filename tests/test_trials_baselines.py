"""Upstream baselines (OpenVINO's NPUW LLM pipeline on CPU) as arms of the schedule A/B."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compile_ahead.commands.main import build_parser
from compile_ahead.profiling.trials.schedule_kind import tallies as schedule_tallies
from compile_ahead.profiling.trials.schedule_kind import upstream_trial


def test_per_rung_rates_group_contexts_like_the_ladder() -> None:
    contexts = [16, 17, 63, 64, 65, 127, 128]
    times = [0.1, 0.1, 0.1, 0.2, 0.2, 0.2, 0.4]
    rungs = upstream_trial.per_rung_rates(contexts, times, [64, 128, 256])
    assert [r["tokens"] for r in rungs] == [3, 3, 1]
    assert rungs[0]["tok_s"] == pytest.approx(3 / 0.3)
    assert rungs[2]["decode_s"] == pytest.approx(0.4)


def test_boundary_tokens_match_the_runtime_keys() -> None:
    tokens = list(range(100, 100 + 61))  # after the prompt, then after each of 60 steps
    entries = upstream_trial.boundary_tokens(16, tokens, [32, 64], window=2)
    assert [e["context"] for e in entries] == [30, 31, 32, 33, 62, 63, 64, 65]
    first = entries[0]
    assert first["step"] == 14 and first["top1"] == tokens[15] and first["rung"] == 32
    windows = schedule_tallies.boundary_windows({"ladder": [32, 64], "boundary_tokens": entries})
    assert sorted(windows) == [32, 64]


def test_npuw_kv_bytes() -> None:
    from compile_ahead.runtime.model.presets import PRESETS

    cfg = PRESETS["qwen2.5-0.5b"].config
    # 24 layers x K,V x 2 heads x 64 dims x 2 bytes = 12 KiB per slot
    assert upstream_trial.npuw_kv_bytes(cfg, 8192) == 12 * 1024 * 8192


@pytest.mark.slow
def test_npuw_baseline_beside_a_schedule_on_tiny(tmp_path: Path) -> None:
    parser = build_parser()  # the one `compile-ahead` CLI
    out = tmp_path / "res"
    args = parser.parse_args(
        ["ab", "baselines", "--model", "tiny", "--arms", "npuw-b1,i2", "--ladder", "64,128",
         "--prompt-len", "16", "--decode-tokens", "100", "--pairs", "1", "--warmup", "0",
         "--out", str(out), "--quiet", "--no-plot"]
    )  # fmt: skip
    assert args.func(args) == 0
    data = json.loads((out / "schedule_ab.json").read_text())
    by_arm = {t["arm"]: t["result"] for t in data["trials"]}
    assert by_arm["npuw-b1"]["schedule"] == "npuw-b1" and by_arm["i2"]["schedule"] == "i2"
    assert by_arm["npuw-b1"]["synthetic"] is True
    fg = next(e for e in data["endpoints"] if e["key"] == "foreground_compile")
    assert fg["values"]["npuw-b1"][0] > 0 and fg["comparisons"]["i2"]["n"] == 1
    agreement = next(t for t in data["tallies"] if t["label"].startswith("Boundary top-1"))
    assert agreement["per_arm"]["i2"].split(" / ")[1].startswith("1 boundaries")
    md = (out / "schedule_ab.md").read_text()
    assert "npuw-b1: OpenVINO NPUW LLM pipeline" in md and "SYNTHETIC" in md


@pytest.mark.slow
def test_genai_llmpipeline_is_an_arm_beside_a_schedule(tmp_path: Path) -> None:
    out = tmp_path / "res"
    args = build_parser().parse_args(
        ["ab", "baselines", "--model", "tiny", "--arms", "genai,i2", "--ladder", "64,128",
         "--prompt-len", "16", "--decode-tokens", "100", "--pairs", "1", "--warmup", "0",
         "--out", str(out), "--quiet", "--no-plot"]
    )  # fmt: skip
    assert args.func(args) == 0
    data = json.loads((out / "schedule_ab.json").read_text())
    genai = next(t["result"] for t in data["trials"] if t["arm"] == "genai")
    assert genai["schedule"] == "genai" and genai["synthetic"] is True
    assert genai["tokens_decoded"] == 100 and genai["foreground_compile_s"] > 0
    # Tokens 2..100 are timed one by one and grouped like the ladder's rungs.
    assert sum(r["tokens"] for r in genai["rungs"]) == 99
    assert [r["capacity"] for r in genai["rungs"]] == [64, 128]
    fg = next(e for e in data["endpoints"] if e["key"] == "foreground_compile")
    assert fg["comparisons"]["i2"]["n"] == 1
