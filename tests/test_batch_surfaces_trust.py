"""The batch surfaces under careless and hostile use, through the commands: the prompts given
one way at every B, --prompts a bounded regular file, B bounded before any work, the memory
a batch needs checked with its logits, fault flags refused alike at every B, one meaning of
--max-new-tokens and one `generate --json` shape, and summaries that say what they count."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli import command, run_cli

from compile_ahead.commands.main import main
from conftest import one_line_error, random_qwen2_checkpoint

TINY_RUN = ["run", "--model", "tiny", "--ladder", "16,32,64", "--no-progress"]
TINY_GENERATE = ["generate", "--model", "tiny"]


def _refused(argv: list[str], capsys) -> str:
    """``argv`` through the command, refused: its one error line."""
    assert main(argv) == 2
    return one_line_error(capsys.readouterr().err)


# -- the prompts, one way -------------------------------------------------------------------
@pytest.mark.parametrize("batch", [[], ["--batch", "2"]])
@pytest.mark.parametrize(
    ("given", "named"),
    [
        (["--prompt-len", "16,20", "--prompt-ids", "3,4"], "--prompt-ids and --prompt-len"),
        (["--prompt-len", "8", "--prompt-ids", "3,4"], "--prompt-ids and --prompt-len"),
        (["--prompt-ids", "1,2", "--prompt-ids", "3,4", "--prompt", "hello"], "--prompt and"),
        (["--prompt-len", "16,20", "--prompt", "hi"], "--prompt and --prompt-len"),
        (["--prompt", "hi", "--prompt-ids", "3,4"], "--prompt and --prompt-ids"),
    ],
)
def test_two_ways_of_giving_the_prompts_are_refused_at_every_batch(
    tmp_path, capsys, batch, given, named
):
    report = tmp_path / "r.json"
    line = _refused([*TINY_RUN, *batch, *given, "--report", str(report)], capsys)
    assert f"give the prompts one way, not {named}" in line
    assert not report.exists()


def test_two_ways_of_giving_the_prompts_are_refused_by_generate(tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("1 2\n3 4\n")
    proc = run_cli(*TINY_GENERATE, "--prompt-ids", "1,2", "--prompts", prompts)
    assert proc.returncode == 2
    assert "argument --prompts: not allowed with argument --prompt-ids" in proc.stderr


def test_one_prompt_with_batch_feeds_every_sequence(tmp_path):
    """--batch B with one --prompt-len is B sequences of that length, in `run` and in `ab`."""
    report = tmp_path / "r.json"
    argv = [*TINY_RUN, "--batch", "3", "--prompt-len", "12", "--decode-tokens", "4"]
    assert main([*argv, "--report", str(report)]) == 0
    assert [s["prompt_len"] for s in json.loads(report.read_text())["sequences"]] == [12] * 3
    out = tmp_path / "ab"
    proc = run_cli(
        "ab", "schedule", "--model", "tiny", "--ladder", "16,32,64", "--arms", "i1,i2",
        "--batch", "3", "--prompt-len", "12", "--decode-tokens", "4", "--pairs", "1",
        "--warmup", "0", "--out", out, "--quiet", "--no-plot",
        "--command", "true {schedule} {prompt_len} {out}",
    )  # fmt: skip
    # The template writes no trial report, so the experiment stops after its design.
    assert (out / "experiment.json").exists(), proc.stderr
    assert json.loads((out / "experiment.json").read_text())["prompt_lens"] == [12] * 3


# -- --prompts FILE -------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["run", "generate"])
def test_a_fifo_as_prompts_is_refused_at_once(tmp_path, command):
    fifo = tmp_path / "prompts"
    os.mkfifo(fifo)
    argv = [*(TINY_RUN if command == "run" else TINY_GENERATE), "--prompts", fifo]
    proc = run_cli(*argv, timeout=60)
    assert proc.returncode == 2
    assert "not a regular file (a FIFO)" in one_line_error(proc.stderr)


def test_a_device_as_prompts_is_refused_before_it_is_read():
    started = time.monotonic()
    proc = run_cli(*TINY_RUN, "--prompts", "/dev/zero", timeout=60)
    assert proc.returncode == 2
    assert "not a regular file (a character device)" in one_line_error(proc.stderr)
    assert time.monotonic() - started < 30


def test_a_linked_or_oversized_prompts_file_is_refused(tmp_path, capsys):
    real = tmp_path / "real.txt"
    real.write_text("1 2 3\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    assert "a symbolic link, which is not followed" in _refused(
        [*TINY_RUN, "--prompts", str(link)], capsys
    )
    big = tmp_path / "big.txt"
    with big.open("wb") as fh:
        fh.truncate(64 * 2**20 + 1)  # sparse: one byte over the cap
    assert "over its 64 MiB cap" in _refused([*TINY_RUN, "--prompts", str(big)], capsys)


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("1;2;3", "looks like token ids but is not"),
        (",1,2", "looks like token ids but is not"),
        ("5 -3 7", "looks like token ids but is not"),
        ("-4", "looks like token ids but is not"),
    ],
)
def test_an_id_line_that_is_not_ids_is_refused_with_its_line(tmp_path, capsys, line, what):
    prompts = tmp_path / "p.txt"
    prompts.write_text(f"1 2 3\n\n{line}\n")
    refused = _refused([*TINY_RUN, "--prompts", str(prompts)], capsys)
    assert f"--prompts {prompts} line 3: " in refused and what in refused


def test_a_byte_order_mark_does_not_turn_ids_into_text(tmp_path):
    """A UTF-8 BOM before the first line of ids: read as ids (tiny has no tokenizer, so a
    text line would be refused)."""
    prompts = tmp_path / "p.txt"
    prompts.write_bytes(b"\xef\xbb\xbf1 2 3\n4, 5, 6\n")
    report = tmp_path / "r.json"
    argv = [*TINY_RUN, "--prompts", str(prompts), "--max-new-tokens", "3"]
    assert main([*argv, "--report", str(report)]) == 0
    assert [s["prompt_len"] for s in json.loads(report.read_text())["sequences"]] == [3, 3]


def test_a_prompt_that_encodes_to_nothing_names_its_line(tiny_qwen2_dir, tmp_path, capsys):
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    for item in tiny_qwen2_dir.iterdir():
        (model_dir / item.name).symlink_to(item)
    tok = Tokenizer(models.WordLevel({"w0": 0, "hello": 5}, unk_token="w0"))
    tok.normalizer = normalizers.Replace(Regex("[^a-z ]"), "")  # digits and signs vanish
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(model_dir / "tokenizer.json"))
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello hello\n12-5 !\n")
    line = _refused(["generate", "--model", str(model_dir), "--prompts", str(prompts)], capsys)
    assert f"--prompts {prompts} line 2: the prompt encodes to no tokens" in line


# -- B bounded, memory checked --------------------------------------------------------------
@pytest.mark.parametrize("batch", ["0", "4097", "1000000", "4294967297", "100000000"])
def test_a_batch_out_of_bounds_is_refused_before_any_work(tmp_path, batch):
    report = tmp_path / "r.json"
    started = time.monotonic()
    for argv in (
        [*TINY_RUN, "--batch", batch, "--report", report],
        [*TINY_GENERATE, "--prompt-ids", "1,2", "--batch", batch],
        ["ab", "schedule", "--model", "tiny", "--arms", "i1,i2", "--ladder", "16,32",
         "--batch", batch, "--out", tmp_path / "ab"],
    ):  # fmt: skip
        proc = run_cli(*argv, timeout=120)
        assert proc.returncode == 2
        assert "--batch must be in 1..4096" in one_line_error(proc.stderr)
    assert time.monotonic() - started < 60
    assert not list(tmp_path.iterdir())


def test_profile_compile_refuses_a_batch_out_of_bounds():
    proc = subprocess.run(
        ["profile-compile", "--model", "tiny", "--batch", "1,5000"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "each B must be in 1..4096" in proc.stderr


def _limit_address_space(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def test_the_memory_check_counts_the_logits_of_a_batch(tmp_path):
    """A model whose KV is small and whose vocabulary is large: at B = 4096 its logits alone
    need 4 GiB. Under a 3 GiB address-space limit the run is refused in one line naming
    them, before any compile, instead of failing in an allocation."""
    model = random_qwen2_checkpoint(
        tmp_path / "wide-vocab",
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=131072,
    )
    report = tmp_path / "r.json"
    argv = ["run", "--model", model, "--ladder", "16,32", "--batch", "4096", "--no-progress"]
    proc = subprocess.run(
        [*command(*argv, "--decode-tokens", "4", "--report", report)],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_address_space(3 * 2**30),
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = one_line_error(proc.stderr)
    assert "4096 sequences" in line and "logits 4.00 GiB" in line, line
    assert not report.exists()


def test_a_large_batch_summary_folds_its_sequences(capsys):
    argv = [*TINY_RUN, "--batch", "40", "--prompt-len", "4", "--decode-tokens", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    listed = [line for line in out.splitlines() if line.startswith("  sequence ")]
    assert len(listed) == 7
    assert "  ... 33 more sequences (each in the report)" in out


# -- fault flags alike at every B -----------------------------------------------------------
@pytest.mark.parametrize("batch", [[], ["--batch", "2"]])
def test_a_worker_fault_on_the_first_rung_is_refused_at_every_batch(capsys, batch):
    argv = ["run", "--model", "tiny", "--schedule", "i2", "--ladder", "16,32", *batch]
    argv += ["--compile-placement", "worker", "--inject-worker-fault", "16:raise"]
    line = _refused(argv, capsys)
    assert "--inject-worker-fault 16: the worker compiles only the rungs after the first" in line


# -- --max-new-tokens, and generate's JSON ---------------------------------------------------
@pytest.mark.parametrize("batch", [1, 2])
def test_max_new_tokens_counts_new_tokens_in_run_and_generate(tmp_path, capsys, batch):
    ids = [arg for _ in range(batch) for arg in ("--prompt-ids", "1,2,3")]
    report = tmp_path / "r.json"
    assert main([*TINY_RUN, *ids, "--max-new-tokens", "5", "--report", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["tokens_decoded"] == 4 * batch  # the first token, then 4 decode steps
    capsys.readouterr()
    assert main([*TINY_GENERATE, *ids, "--max-new-tokens", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["max_new_tokens"] == 5 and out["batch"] == batch
    assert [len(s["tokens"]) for s in out["sequences"]] == [5] * batch
    assert {s["stop_reason"] for s in out["sequences"]} == {"max_new_tokens"}


def test_generate_json_has_one_shape_at_every_batch(capsys):
    shapes = []
    for ids in (["--prompt-ids", "1,2"], ["--prompt-ids", "1,2", "--prompt-ids", "3,4,5"]):
        assert main([*TINY_GENERATE, *ids, "--max-new-tokens", "3", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        shapes.append((set(out), {k for s in out["sequences"] for k in s}))
    assert shapes[0] == shapes[1]


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["--decode-tokens", "3", "--max-new-tokens", "4", "--prompt-ids", "1,2"], "not both"),
        (["--max-new-tokens", "4"], "it needs a greedy prompt"),
        (["--max-new-tokens", "1", "--prompt-ids", "1,2"], "--max-new-tokens must be >= 2"),
    ],
)
def test_max_new_tokens_refusals(capsys, given, says):
    assert says in _refused([*TINY_RUN, *given], capsys)


# -- messages that say what they count -------------------------------------------------------
def test_a_batch_prefill_summary_counts_prompts_and_tokens(capsys):
    argv = [*TINY_RUN, "--prompt-len", "20,30,40", "--decode-tokens", "3"]
    assert main([*argv, "--prefill-chunk", "16"]) == 0
    assert "of 3 prompts, 90 tokens:" in capsys.readouterr().out


def test_an_unknown_flag_is_named_before_a_missing_required_one():
    proc = run_cli(*TINY_GENERATE, "--prompt-id", "1")
    assert proc.returncode == 2
    err = proc.stderr
    assert "unrecognized arguments: --prompt-id 1" in err and "is required" not in err


def test_a_run_interrupted_in_prefill_reports_the_kv_it_wrote(tmp_path):
    """3,000 sequences prefilled one by one on the prefill graph, interrupted part-way: the
    report's committed KV counts the rows written, not 0."""
    report = tmp_path / "r.json"
    argv = ["run", "--model", "tiny", "--ladder", "64,128", "--schedule", "i3"]
    argv += ["--batch", "3000", "--prompt-len", "40", "--decode-tokens", "20"]
    argv += ["--prefill-chunk", "32", "--report", str(report)]
    proc = subprocess.Popen(
        command(*argv), stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("prefilling: "):  # the first prompt is in
            break
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=300)
    assert proc.returncode == 130
    data = json.loads((tmp_path / "r.failed.json").read_text())
    prefilled = [s for s in data["prefill"]["sequences"] if s["prefill_s"] > 0]
    assert 0 < len(prefilled) < 3000
    assert data["kv_committed_peak_bytes"] > 0


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_ov_config_file_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    """--ov-config-file is read by the same rule as --prompts: a FIFO cannot block the
    command, a device cannot fill its memory."""
    path = tmp_path / "config.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    proc = run_cli(*TINY_RUN, "--ov-config-file", path, timeout=60)
    assert proc.returncode == 2
    assert "not a regular file" in one_line_error(proc.stderr)
