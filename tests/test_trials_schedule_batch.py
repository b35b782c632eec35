"""`compile-ahead ab schedule --batch B`: every trial a batched `compile-ahead run`, top-1
agreement per sequence, the batch's endpoints, and the arms that cannot take a batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli import run_cli

from compile_ahead.profiling.trials.schedule_kind import arms as schedule_arms
from compile_ahead.profiling.trials.schedule_kind import tallies as schedule_tallies
from compile_ahead.profiling.trials.schedule_kind.batch import ragged_lengths
from compile_ahead.runtime.ladder.settings.capacities import Ladder

TINY = ["--model", "tiny", "--ladder", "16,32,64,128"]


def _option(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command else None


@pytest.mark.slow
def test_ab_schedule_at_batch_2_runs_batched_trials_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "res"
    proc = run_cli(
        "ab", "schedule", *TINY, "--arms", "i1,i2", "--batch", "2", "--prompt-len", "20",
        "--prompt-spread", "0.25", "--decode-tokens", "50", "--pairs", "1", "--warmup", "0",
        "--out", out, "--quiet", "--no-plot",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    exp = json.loads((out / "experiment.json").read_text())
    assert exp["batch"] == 2 and exp["prompt_lens"] == [15, 25] and exp["prompt_len"] == 20
    for arm in exp["arms"]:
        assert _option(arm["command"], "--batch") == "2"
        assert _option(arm["command"], "--prompt-len") == "15,25"
    trials = [json.loads(p.read_text()) for p in sorted(out.glob("trial-*.json"))]
    assert [t["batch"] for t in trials] == [2, 2]
    assert [[s["prompt_len"] for s in t["sequences"]] for t in trials] == [[15, 25]] * 2
    data = json.loads((out / "schedule_ab.json").read_text())
    keys = {e["key"] for e in data["endpoints"]}
    assert {"batch_tok_s", "step_time", "critical_path", "decode", "kv_reserved_avg"} <= keys
    tallies = {t["label"]: t["per_arm"] for t in data["tallies"]}
    # sequence 0 (15 + 50 tokens) decodes across 16, 32 and 64; sequence 1 (25 + 50) across
    # 32 and 64: five windows, each against the same sequence's in the control
    agreement = tallies["Boundary top-1 agreement with i1"]["i2"]
    assert agreement.startswith("5 / 5 sequence boundary windows"), agreement
    md = (out / "schedule_ab.md").read_text()
    assert "batch 2: prompts 15,25 tokens, 50 decoded tokens" in md
    assert "| Decode tok/s, all sequences (aggregate) |" in md


def test_batch_1_trials_are_the_commands_they_always_were(tmp_path: Path) -> None:
    """No batch flag, one --prompt-len, no batch in the record: old stores keep their digests."""
    out = tmp_path / "res"
    proc = run_cli(
        "ab", "schedule", *TINY, "--arms", "i1,i2", "--batch", "1", "--prompt-len", "20",
        "--decode-tokens", "20", "--pairs", "1", "--warmup", "0", "--out", out, "--quiet",
        "--no-plot", "--command", "true {schedule} {prompt_len} {out}",
    )  # fmt: skip
    exp = json.loads((out / "experiment.json").read_text())
    assert "batch" not in exp and "prompt_lens" not in exp, proc.stderr
    assert [a["command"][:3] for a in exp["arms"]] == [["true", "i1", "20"], ["true", "i2", "20"]]
    cmd = schedule_arms.make_arms(("i1",), "tiny", Ladder((16, 32)), 8, 10)[0].command
    assert "--batch" not in cmd and _option(list(cmd), "--prompt-len") == "8"


def _result(tokens: dict[tuple[int, int], int]) -> dict:
    """A batched run report's boundary windows: (sequence, step) -> top-1, around C=32."""
    entries = [
        {"sequence": seq, "step": step, "context": 30 + step % 4, "top1": top1}
        for (seq, step), top1 in tokens.items()
    ]
    return {"ladder": [16, 32, 64], "boundary_tokens": entries}


def test_agreement_is_per_sequence_and_names_a_disagreeing_sequence() -> None:
    control = _result({(s, t): 100 * s + t for s in range(3) for t in range(40, 44)})
    same = _result({(s, t): 100 * s + t for s in range(3) for t in range(40, 44)})
    # sequence 1 differs at one step; sequence 0's tokens at sequence 2's steps would agree
    # if steps were compared without their sequence
    other = _result({(s, t): 100 * s + t + (s == 1 and t == 42) for s in range(3)
                     for t in range(40, 44)})  # fmt: skip
    swapped = _result({(s, t): 100 * (2 - s) + t for s in range(3) for t in range(40, 44)})
    assert schedule_tallies.agreement_counts(control, same)[:4] == (3, 3, 12, 12)
    assert schedule_tallies.agreement_counts(control, other)[:4] == (2, 3, 11, 12)
    assert schedule_tallies.agreement_counts(control, swapped)[:4] == (1, 3, 4, 12)
    tally = schedule_tallies.agreement_tally(
        {"i1": [control, control], "i2": [same, other], "i3": [other, other]}, "i1"
    )
    assert tally.per_arm["i2"] == (
        "5 / 6 sequence boundary windows (23 / 24 steps top-1 equal); disagreeing: sequence 1 at 32"
    )
    assert tally.per_arm["i3"].endswith("disagreeing: sequence 1 at 32 (2 blocks)")


@pytest.mark.parametrize("kind", ["schedule", "baselines"])
def test_npuw_arms_are_refused_at_batch_above_1(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "res"
    arms = ["--arms", "i1,npuw-b0"] if kind == "schedule" else []
    proc = run_cli("ab", kind, *TINY, *arms, "--batch", "2", "--out", out)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "--batch 2: the arm(s) " in lines[0] and "npuw-b0" in lines[0], lines[0]
    assert "decode one sequence" in lines[0]
    if kind == "baselines":  # its default arms: the ones that take a batch are named
        assert "run --arms genai,i2,i3, or --batch 1" in lines[0]
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch", "0"], "--batch must be in 1..4096 (sequences stepped together), got 0"),
        (["--batch", "100000000"], "--batch must be in 1..4096"),
        (["--batch", "four"], "argument --batch: invalid int value: 'four'"),
        (["--batch", "2", "--prompt-spread", "1.5"], "--prompt-spread must be in [0, 1)"),
        (["--batch", "2", "--prompt-len", "8,9", "--prompt-spread", "0.2"],
         "--prompt-spread spreads one --prompt-len"),
        (["--batch", "3", "--prompt-len", "8,9"], "--batch 3 needs one --prompt-len per sequence"),
        (["--prompt-len", "60,90", "--decode-tokens", "50"],
         "the longest prompt 90 + --decode-tokens 50 exceeds the top rung 128"),
    ],
)  # fmt: skip
def test_bad_batch_arguments_are_refused_in_one_line(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    proc = run_cli("ab", "schedule", *TINY, "--arms", "i1,i2", *argv, "--out", tmp_path / "r")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    # the flag's own type refuses in argparse's way (usage, then the one line of the error)
    assert message in lines[-1] and all("error" not in line for line in lines[:-1])
    assert not (tmp_path / "r").exists()


def test_ragged_prompts_spread_around_the_given_length() -> None:
    assert ragged_lengths(64, 1, 0.25) == (64,)
    assert ragged_lengths(64, 2, 0.25) == (48, 80)
    assert ragged_lengths(64, 8, 0.25) == (48, 53, 57, 62, 66, 71, 75, 80)
    assert ragged_lengths(2, 4, 0.25) == (2, 2, 2, 2)  # never below one token
    assert sum(ragged_lengths(512, 4, 0.25)) == 4 * 512
    assert ragged_lengths(64, 3, 0.0) == (64, 64, 64)  # no spread: one length for all


@pytest.mark.slow
def test_genai_arm_generates_the_batch_beside_a_schedule(tmp_path: Path) -> None:
    out = tmp_path / "res"
    proc = run_cli(
        "ab", "baselines", *TINY, "--arms", "genai,i2", "--batch", "2", "--prompt-len", "16,24",
        "--decode-tokens", "30", "--pairs", "1", "--warmup", "0", "--out", out, "--quiet",
        "--no-plot",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "schedule_ab.json").read_text())
    genai = next(t["result"] for t in data["trials"] if t["arm"] == "genai")
    assert genai["batch"] == 2 and genai["prompt_lens"] == [16, 24]
    assert genai["tokens_generated"] == 60 and genai["tokens_per_s"] > 0
    ours = next(t["result"] for t in data["trials"] if t["arm"] == "i2")
    # ours: the prompt's last step's token, then 30 decode steps
    assert ours["batch"] == 2 and ours["tokens_generated"] == 62
    step = next(e for e in data["endpoints"] if e["key"] == "step_time")
    assert step["comparisons"]["i2"]["n"] == 1
