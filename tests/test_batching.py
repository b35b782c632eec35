"""A batch of sequences through the ladder: each sequence's greedy tokens equal its own batch-1
run and transformers' greedy, on every schedule, with ragged prompts, an EOS mid-run and
boundaries crossed, whole and split graphs; the batch flags of `run` and what they refuse."""

from __future__ import annotations

import json
import subprocess

import pytest
from batch_runs import batch1_tokens, eos_mid_run, run_batch
from cli import run_cli, run_profile_compile

from compile_ahead.runtime.compile.settings.modes import GraphMode
from compile_ahead.runtime.ladder.runner import run_ladder
from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import Prompt, RunConfig
from compile_ahead.runtime.ladder.settings.run_protocol import greedy
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import F32, reference_greedy, start_decoding_run

LADDER = Ladder.parse("tiny")  # 16, 32, 64, 128
# Ragged prompts, the longest on the first rung (16): 60 decode steps take it past 32 and 64.
PROMPTS = [[5, 17, 301], list(range(3, 15)), [7, 8, 9, 10, 11, 12, 13]]
DECODE_TOKENS = 60
EOS_SEQUENCE = 2  # this one is given an EOS it generates mid-run


def _case(source, model_dir, graph=None, options=F32):
    """The protocols (one with an EOS mid-run), each one's batch-1 tokens in ``graph`` mode,
    and transformers' greedy tokens from ``model_dir``."""
    plain = [greedy(p, DECODE_TOKENS) for p in PROMPTS]
    free = batch1_tokens(source, plain[EOS_SEQUENCE], LADDER, graph=graph, options=options)
    eos = eos_mid_run(free)  # after the first boundary here
    protocols = list(plain)
    protocols[EOS_SEQUENCE] = greedy(PROMPTS[EOS_SEQUENCE], DECODE_TOKENS, (eos,))
    alone = [batch1_tokens(source, p, LADDER, graph=graph, options=options) for p in protocols]
    reference = [reference_greedy(model_dir, p, DECODE_TOKENS + 1)[0] for p in PROMPTS]
    return source, protocols, alone, reference


@pytest.fixture(scope="module")
def checkpoint_case(tiny_qwen2_dir, f32_cached):
    return _case(resolve_model(str(tiny_qwen2_dir)), tiny_qwen2_dir, options=f32_cached)


@pytest.fixture(scope="module")
def split_preset_case(f32_cached):
    """The tiny preset in split graphs; transformers reads the preset's own checkpoint."""
    source = resolve_model("tiny")
    assert source.model_dir is not None, "the tiny preset has a checkpoint directory"
    return _case(source, source.model_dir, GraphMode.SPLIT, f32_cached)


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_each_sequence_equals_its_batch1_run_and_transformers(
    checkpoint_case, schedule, f32_cached
):
    _check_batch(checkpoint_case, schedule, options=f32_cached)


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_split_graphs_each_sequence_equals_its_batch1_run_and_transformers(
    split_preset_case, schedule, f32_cached
):
    """`--graph split --batch 3`: [3, C] weight parts and attention cores, each sequence with
    its own positions and mask, give each sequence its own split batch-1 run's tokens."""
    _check_batch(split_preset_case, schedule, GraphMode.SPLIT, f32_cached)


def _check_batch(case, schedule: str, graph=None, options=F32) -> None:
    source, protocols, alone, reference = case
    result = run_batch(source, protocols, LADDER, schedule, options, graph=graph)
    got = [s["tokens"] for s in result.sequences]
    assert got == alone
    for tokens, ref in zip(got, reference, strict=True):
        assert tokens == ref[: len(tokens)]
    stops = [s["stop_reason"] for s in result.sequences]
    assert stops[EOS_SEQUENCE] == "eos" and len(got[EOS_SEQUENCE]) < DECODE_TOKENS + 1
    assert [s for i, s in enumerate(stops) if i != EOS_SEQUENCE] == ["token limit"] * 2
    if schedule != "b0":  # b0 runs on the top rung only
        crossed = [(b.from_rung, b.to) for b in result.report.boundaries]
        assert crossed == [(16, 32), (32, 64), (64, 128)], crossed
    # The EOS sequence stopped after the first boundary; nothing of it after its stop.
    assert result.report.batch is not None and result.report.batch.batch == len(PROMPTS)


@pytest.mark.parametrize("schedule", ["i2", "i3"])
def test_tiny_preset_teacher_forced_batch_matches_batch1(schedule, f32_cached):
    source = resolve_model("tiny")
    lengths = (4, 10, 7)
    prompts = tuple(Prompt(n) for n in lengths)
    config = RunConfig(SCHEDULES[schedule], LADDER, tuple(prompts), 70, options=f32_cached)
    result = run_ladder(source, config)
    assert result.error is None and result.completed, result.error
    for n, seq in zip(lengths, result.sequences, strict=True):
        one = RunConfig(SCHEDULES[schedule], LADDER, Prompt(n), 70, f32_cached)
        alone = run_ladder(source, one)
        assert seq["tokens"] == [alone.first_token, *alone.predicted]
        assert seq["prompt_len"] == n and seq["stop_reason"] == "token limit"


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_cli("run", "--model", "tiny", *args, timeout=timeout)


def test_run_batch_report(tmp_path):
    """`run --batch` through the command: the report's per-sequence and batch fields, and a
    prompts file giving the same tokens as --prompt-ids repeated."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("5 17 301\n\n3,4,5,6,7,8,9,10,11,12\n")
    common = ["--ladder", "tiny", "--schedule", "i2", "--inference-precision", "f32"]
    common += ["--decode-tokens", "40", "--no-progress"]
    by_file = _run(*common, "--prompts", str(prompts), "--report", str(tmp_path / "f.json"))
    assert by_file.returncode == 0, by_file.stderr
    ids = ["--prompt-ids", "5,17,301", "--prompt-ids", "3,4,5,6,7,8,9,10,11,12"]
    by_ids = _run(*common, *ids, "--batch", "2", "--report", str(tmp_path / "i.json"))
    assert by_ids.returncode == 0, by_ids.stderr
    assert "sequence 1: prompt 10, 41 tokens" in by_ids.stdout
    report = json.loads((tmp_path / "i.json").read_text())
    same = json.loads((tmp_path / "f.json").read_text())
    assert [s["tokens"] for s in report["sequences"]] == [s["tokens"] for s in same["sequences"]]
    assert report["batch"] == 2
    assert [s["prompt_len"] for s in report["sequences"]] == [3, 10]
    for seq in report["sequences"]:
        assert seq["tokens_generated"] == len(seq["tokens"]) == 41
        assert seq["stop_reason"] == "token limit" and seq["first_token_s"] > 0
    assert report["tokens_per_s"] > 0 and report["step_s_mean"] > 0
    assert report["kv_reserved_peak_bytes_per_sequence"] * 2 == report["kv_reserved_peak_bytes"]
    assert report["boundaries"], "the batch crossed no boundary"
    for b in report["boundaries"]:
        assert b["allocation_s"] >= 0 and b["copy_s"] >= 0 and b["wait_s"] is not None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--batch", "0"], "--batch must be in 1..4096 (sequences stepped together), got 0"),
        (["--batch", "3", "--prompt-len", "4,10"], "--batch 3 needs 3 prompts but 2 were given"),
        (["--batch", "3", "--prompt-ids", "1,2", "--prompt-ids", "3"], "--batch 3 needs 3 prompts"),
        (["--prompt-len", "4,300"], "--prompt-len 300 must be in 1..127"),
        (
            ["--prompt-ids", "1,2", "--prompt-ids", ",".join(["7"] * 200)],
            "the prompt of sequence 1 (200 tokens) does not fit the top rung (128)",
        ),
        (
            ["--prompt-len", "4,10", "--prefill-chunk", "64"],
            "--prefill-chunk 64 exceeds the first rung (16)",
        ),
        (["--batch", "4000000"], "--batch must be in 1..4096"),
    ],
)
def test_bad_batch_input_is_one_line_and_writes_nothing(tmp_path, args, says):
    report = tmp_path / "report.json"
    proc = _run("--ladder", "tiny", "--no-progress", "--report", str(report), *args)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("compile-ahead:")]
    assert len(errors) == 1 and says in errors[0], proc.stderr
    assert not list(tmp_path.iterdir())  # nothing written, nothing compiled into a report


def _generate(*args: str) -> subprocess.CompletedProcess:
    return run_cli(
        "generate",
        "--model",
        "tiny",
        "--inference-precision",
        "f32",
        "--max-new-tokens",
        "12",
        "--json",
        *args,
        timeout=300,
    )


def test_generate_batch_gives_each_prompt_its_own_tokens():
    prompts = ["5,17,301", "3,4,5,6,7,8,9,10,11"]
    alone = []
    for ids in prompts:
        proc = _generate("--prompt-ids", ids)
        assert proc.returncode == 0, proc.stderr
        alone.append(json.loads(proc.stdout)["sequences"][0]["tokens"])
    proc = _generate(*[arg for ids in prompts for arg in ("--prompt-ids", ids)])
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [s["tokens"] for s in report["sequences"]] == alone


def test_batch_trace_has_one_decode_track_and_each_stop(tmp_path):
    from trace_processor import NodeTraceProcessor, unavailable_reason

    from compile_ahead.profiling.perfetto.validate import validate_trace

    trace = tmp_path / "run.pftrace"
    proc = _run(
        *["--ladder", "tiny", "--schedule", "i3", "--no-progress", "--decode-tokens", "20"],
        *["--prompt-len", "4,10,7", "--trace", str(trace)],
    )
    assert proc.returncode == 0, proc.stderr
    report = validate_trace(trace)
    assert report.ok and report.instants >= 3, report.summary()
    if unavailable_reason() is not None:
        pytest.skip(str(unavailable_reason()))
    with NodeTraceProcessor.open(trace) as tp:
        assert tp.error_stats() == []
        rows = tp.rows("select name, track_id from slice order by ts")
        stops = [r["name"] for r in rows if r["name"].startswith("sequence ")]
        assert sorted(stops) == [f"sequence {i} stopped: token limit" for i in range(3)]
        decode_tracks = {r["track_id"] for r in rows if r["name"].startswith("decode")}
        assert len(decode_tracks) == 1
        # 10 + 20 calls for the longest sequence; the first 4, while every sequence was in
        # its prompt (the shortest has 4 tokens), are the prefill.
        assert sum(r["name"].startswith("decode") for r in rows) == 10 + 20 - 4


def test_profile_compile_batch_profiles_batched_rungs(tmp_path):

    out = tmp_path / "profile"
    args = ["--model", "tiny", "--ladder", "16,32", "--inference-precision", "f32"]
    proc = run_profile_compile(*args, "--batch", "3", "--decode-tokens", "4", "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert [r["batch"] for r in report["rungs"]] == [3, 3]
    assert [d["steps"] for d in report["decode"]] == [4, 4]
    refused = run_profile_compile(*args, "--batch", "3", "--graph-kind", "both", "--out", out)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "profile-compile: error: --batch 3: prefill graphs take one sequence; use --graph-kind "
        "decode"
    )


@pytest.mark.parametrize("graph", ["whole", "split"])
def test_profile_compile_profiles_each_rung_at_each_batch_given(tmp_path, graph):
    """`--batch 1,3`: a row per (rung, B) in the table and the report, each compile of a graph
    of that B, and decode steps timed on each."""
    out = tmp_path / "profile"
    args = ["--model", "tiny", "--ladder", "16,32", "--inference-precision", "f32"]
    args += ["--graph", graph, "--decode-tokens", "2", "--out", out]
    proc = run_profile_compile(*args, "--batch", "1,3")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    rows = [(r["capacity"], r["batch"], r["kind"]) for r in report["rungs"]]
    assert rows == [(16, 1, "decode"), (16, 3, "decode"), (32, 1, "decode"), (32, 3, "decode")]
    assert all(r["phases_ns"]["compile_model"] > 0 for r in report["rungs"])
    decode = [(d["capacity"], d["batch"], d["steps"]) for d in report["decode"]]
    assert decode == [(16, 1, 2), (16, 3, 2), (32, 1, 2), (32, 3, 2)]
    assert _table(proc.stdout) == [
        ["rung", "C", "B", "kind"],
        ["16", "1", "decode"],
        ["16", "3", "decode"],
        ["32", "1", "decode"],
        ["32", "3", "decode"],
    ]
    one = run_profile_compile(*args[:-2], "--out", tmp_path / "one")  # B=1 alone: no B column
    assert one.returncode == 0, one.stderr
    assert _table(one.stdout) == [["rung", "C", "kind"], ["16", "decode"], ["32", "decode"]]


def _table(stdout: str) -> list[list[str]]:
    """The per-rung table's leading columns: its head (to the kind) and each row's."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("rung C"))
    rows = lines[start : lines.index("", start)][:-1]  # the footnote ends it
    cells = [row.split() for row in rows]
    return [cells[0][: cells[0].index("kind") + 1]] + [
        row[: row.index("decode") + 1] for row in cells[1:]
    ]


@pytest.mark.parametrize(
    ("batch", "says"),
    [
        ("1,1", "argument --batch: each B once, got '1,1'"),
        ("0,2", "argument --batch: each B must be in 1..4096, got '0,2'"),
        ("2,x", "argument --batch: expected an integer or comma-separated integers"),
    ],
)
def test_profile_compile_bad_batch_list_is_one_line(tmp_path, batch, says):
    proc = run_profile_compile("--model", "tiny", "--batch", batch, "--out", tmp_path / "p")
    assert proc.returncode == 2 and says in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert not (tmp_path / "p").exists()


def test_profile_compile_batch_list_with_a_schedule_is_refused(tmp_path):
    proc = run_profile_compile(
        "--model", "tiny", "--batch", "1,2", "--schedule", "i2", "--out", tmp_path / "p"
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "profile-compile: error: --batch 1,2: --schedule overlays one run; give one B"
    )


def test_a_report_over_the_prompts_file_is_refused_and_the_file_kept(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("5 17 301\n3 4 5\n")
    proc = _run(
        "--ladder", "tiny", "--no-progress", "--prompts", str(prompts), "--report", str(prompts)
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert prompts.read_text() == "5 17 301\n3 4 5\n"


@pytest.mark.slow
def test_an_interrupted_batch_keeps_every_sequence_so_far(tmp_path):
    import signal
    import time

    report = tmp_path / "report.json"
    run = ["run", "--model", "tiny", "--ladder", "tiny", "--schedule", "i2"]
    run += ["--prompt-len", "4,10", "--decode-tokens", "110", "--step-delay", "0.2"]
    proc = start_decoding_run([*run, "--report", str(report)])
    time.sleep(4)  # past the longer prompt (10 steps of at least 0.2 s); 120 steps take 24 s
    failed = tmp_path / "report.failed.json"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert not report.exists()
    data = json.loads(failed.read_text())
    assert data["stop_reason"] == "interrupted"
    for seq in data["sequences"]:
        assert seq["stop_reason"] == "interrupted"
        assert 0 < seq["tokens_generated"] == len(seq["tokens"]) < 111
