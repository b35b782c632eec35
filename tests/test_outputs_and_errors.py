"""A user's files are never lost or left in a mess, and bad input gets one line that says what
is wrong: through the public commands, checking exit codes, messages and the files left."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cli import COMPILE_AHEAD, PROFILE_COMPILE
from toy_decoder import toy_decoder_ir

from compile_ahead.commands.main import main
from compile_ahead.commands.profile_compile import main as profile_main
from compile_ahead.output.checks import OUTPUT_MARKER
from compile_ahead.profiling.traces.pyspy import find_pyspy
from conftest import earlier_output, small_tmpfs
from conftest import one_line_error as _one_line_error

CLI = list(COMPILE_AHEAD)
PROFILE = list(PROFILE_COMPILE)
RUN = ["run", "--model", "tiny", "--ladder", "16,32", "--prompt-len", "4", "--no-progress"]
RUN += ["--no-cache"]


def _cli(argv: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)


def _staging_left(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


# -- 8/9: profile-compile --out replaces only its own earlier output -------------------------


def test_profile_out_holding_user_files_is_refused_and_kept(tmp_path, capsys):
    out = tmp_path / "mine"
    (out / "sub").mkdir(parents=True)
    (out / "notes.txt").write_text("my notes")
    (out / "sub" / "thesis.tex").write_text("my thesis")
    assert profile_main(["--model", "tiny", "--ladder", "16", "--out", str(out)]) == 2
    line = _one_line_error(capsys.readouterr().err, "profile-compile")
    assert f"--out {out}: holds files that are not an earlier output" in line
    assert (out / "notes.txt").read_text() == "my notes"
    assert (out / "sub" / "thesis.tex").read_text() == "my thesis"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no staging, no .failed


@pytest.mark.parametrize("where", [".", "..", "cwd-absolute"])
def test_profile_out_of_the_working_directory_is_refused(where, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("keep")
    monkeypatch.chdir(work)
    out = str(work) if where == "cwd-absolute" else where
    assert profile_main(["--model", "tiny", "--ladder", "16", "--out", out]) == 2
    line = _one_line_error(capsys.readouterr().err, "profile-compile")
    assert "is the working directory or one of its parents" in line
    assert (work / "keep.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # no ..XXXX, no ..old-XXXX
    assert sorted(p.name for p in work.iterdir()) == ["keep.txt"]


@pytest.mark.slow
def test_profile_replaces_its_own_earlier_output_and_names_the_final_trace(tmp_path):
    out = earlier_output(tmp_path / "prof", {"stale.txt": "from the earlier profile"})
    proc = _cli([*PROFILE, "--model", "tiny", "--ladder", "16", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (out / "stale.txt").exists()
    assert (out / OUTPUT_MARKER).is_file() and (out / "report.json").is_file()
    # The trace is named where it is published, never at its staging path.
    assert f"{out / 'trace.pftrace'}: " in proc.stdout
    assert "/.prof." not in proc.stdout
    assert _staging_left(tmp_path) == []


# -- 10: ab --out is a new directory per experiment ---------------------------------------------

AB_COMPILE = ["ab", "compile", "--arm", "A=current", "--arm", "B=current", "--model", "tiny"]
AB_COMPILE += ["--ladder", "16"]
AB_SCHEDULE = ["ab", "schedule", "--model", "tiny", "--arms", "i1,i2", "--ladder", "64,128"]
AB_SCHEDULE += ["--prompt-len", "8"]


@pytest.mark.parametrize("kind", ["compile", "schedule"])
@pytest.mark.parametrize("existing", ["earlier-experiment", "user-files", "a-file"])
def test_ab_out_must_be_new(kind, existing, tmp_path, capsys):
    out = tmp_path / "res"
    if existing == "a-file":
        out.write_text("keep")
    else:
        out.mkdir()
        name = "experiment.json" if existing == "earlier-experiment" else "notes.txt"
        (out / name).write_text("keep")
    argv = AB_COMPILE if kind == "compile" else AB_SCHEDULE
    assert main([*argv, "--out", str(out)]) == 2
    line = _one_line_error(capsys.readouterr().err)
    expected = "is not a directory" if existing == "a-file" else "exists and is not empty"
    assert f"--out {out}: " in line and expected in line
    if existing == "a-file":
        assert out.read_text() == "keep"
    else:
        assert [p.read_text() for p in out.iterdir()] == ["keep"]


# A trial command standing in for `compile-ahead run --report OUT` (argv: schedule, out).
FAKE_RUN = """
import json, sys
schedule, out = sys.argv[1], sys.argv[2]
json.dump({"model": "tiny", "synthetic": True, "device": "CPU", "schedule": schedule,
           "ladder": [64, 128], "foreground_compile_s": 1.0, "critical_path_s": 2.0,
           "decode_s": 1.0, "rungs": [], "boundaries": []}, open(out, "w"))
"""


def test_ab_twice_into_one_directory_keeps_the_first_experiment(tmp_path):
    fake = tmp_path / "fake_run.py"
    fake.write_text(FAKE_RUN)
    out = tmp_path / "res"
    argv = [*CLI, *AB_SCHEDULE, "--pairs", "1", "--warmup", "0", "--no-plot", "--out", str(out)]
    argv += ["--command", f"{sys.executable} {fake} {{schedule}} {{out}}"]
    first = _cli(argv)
    assert first.returncode == 0, first.stderr[-3000:]
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert "experiment.json" in before and OUTPUT_MARKER in before
    second = _cli(argv)
    assert second.returncode == 2
    assert "exists and is not empty" in _one_line_error(second.stderr)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# -- 11: a full disk ----------------------------------------------------------------------------


def _fill(directory: Path, leave: int = 0) -> None:
    """Fill the file system to the last byte, then give ``leave`` bytes back."""
    filler = directory / "filler"
    with contextlib.suppress(OSError), filler.open("wb", buffering=0) as fh:
        while True:
            fh.write(b"\0" * 65536)
    os.truncate(filler, filler.stat().st_size - leave)


@pytest.mark.parametrize("outputs", ["report", "report+trace"])
def test_run_on_a_full_disk_is_one_line_after_the_summary(outputs, tmp_path):
    with small_tmpfs(tmp_path / "disk") as disk:
        (disk / "r.json").write_text('{"earlier": true}')
        _fill(disk)
        argv = [*CLI, *RUN, "--report", str(disk / "r.json")]
        if outputs == "report+trace":
            argv += ["--trace", str(disk / "t.pftrace")]
        proc = _cli(argv)
        assert proc.returncode == 2, proc.stderr[-3000:]
        line = _one_line_error(proc.stderr)
        assert f"{disk / 'r.json'}: could not be written: No space left on device" in line
        if outputs == "report+trace":
            assert f"{disk / 't.pftrace'}: could not be written: No space left" in line
        assert "stop: completed" in proc.stdout  # the summary came first
        assert (disk / "r.json").read_text() == '{"earlier": true}'
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "r.json"]


@pytest.mark.parametrize("free_kib", [0, 64], ids=["full-at-start", "full-during-the-profile"])
def test_profile_on_a_full_disk_leaves_no_staging(free_kib, tmp_path):
    with small_tmpfs(tmp_path / "disk") as disk:
        out = earlier_output(disk / "prof", {"report.json": "earlier"})  # kept
        _fill(disk, leave=free_kib * 1024)
        proc = _cli([*PROFILE, "--model", "tiny", "--ladder", "16", "--out", str(out)])
        assert proc.returncode == 2, proc.stderr[-3000:]
        line = _one_line_error(proc.stderr, "profile-compile")
        assert f"{out}/" in line and "No space left on device" in line
        assert "/.prof." not in line  # named where it was to go, not where it was staged
        if free_kib:
            assert "rung C" in proc.stdout  # the table came before the failed write
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "prof"]
        assert (out / "report.json").read_text() == "earlier"


@pytest.mark.parametrize("free_kib", [0, 8], ids=["full-at-start", "full-during-the-trials"])
def test_ab_on_a_full_disk_is_one_line(free_kib, tmp_path):
    fake = tmp_path / "fake_run.py"
    fake.write_text(FAKE_RUN)
    with small_tmpfs(tmp_path / "disk") as disk:
        _fill(disk, leave=free_kib * 1024)
        argv = [*CLI, *AB_SCHEDULE, "--pairs", "1", "--warmup", "0", "--no-plot"]
        argv += ["--command", f"{sys.executable} {fake} {{schedule}} {{out}}"]
        proc = _cli([*argv, "--out", str(disk / "res")])
        assert proc.returncode == 2, proc.stderr[-3000:]
        line = _one_line_error(proc.stderr)
        assert f"{disk / 'res'}" in line and "No space left on device" in line


# -- 12-14: models and tokenizers that are not what they claim ---------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (None, "no config.json beside it, so the model's max_position_embeddings"),
        ([1, 2], "config.json: not a JSON object"),
        ({"max_position_embeddings": None}, "max_position_embeddings must be a positive integer"),
        ({"max_position_embeddings": "4k"}, "max_position_embeddings must be a positive integer"),
    ],
    ids=["missing", "a-list", "null", "a-string"],
)
def test_ir_without_a_usable_config_says_so(config, message, tmp_path, capsys):
    toy_decoder_ir(tmp_path / "ir")
    if config is not None:
        (tmp_path / "ir" / "config.json").write_text(json.dumps(config))
    assert main(["run", "--model", str(tmp_path / "ir"), "--ladder", "16,32", "--no-cache"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert message in line and "exceeds" not in line


@pytest.mark.parametrize("tokenizer", ["another-model", "garbage"])
def test_openvino_tokenizer_that_is_not_one_is_one_line(tokenizer, tmp_path):
    model = tmp_path / "ir"
    xml = toy_decoder_ir(model)
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 64}))
    if tokenizer == "another-model":
        shutil.copy(xml, model / "openvino_tokenizer.xml")
        shutil.copy(xml.with_suffix(".bin"), model / "openvino_tokenizer.bin")
    else:
        (model / "openvino_tokenizer.xml").write_text("this is not a model\n")
    proc = _cli([*CLI, "generate", "--model", str(model), "--prompt", "hi", "--no-cache"])
    assert proc.returncode == 2
    line = _one_line_error(proc.stderr)
    expected = "not a tokenizer" if tokenizer == "another-model" else "not an OpenVINO IR"
    assert f"{model / 'openvino_tokenizer.xml'}: {expected}" in line
    assert proc.stderr.strip() == line  # nothing else printed (no parser noise)


@pytest.mark.parametrize("command", ["generate", "run"])
def test_tokenizer_json_beyond_the_vocabulary_is_refused(command, tiny_qwen2_dir, tmp_path, capsys):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    model = tmp_path / "model"
    shutil.copytree(tiny_qwen2_dir, model)  # vocabulary 1000
    tok = Tokenizer(WordLevel({"[UNK]": 0, "hello": 5000}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(model / "tokenizer.json"))
    argv = [command, "--model", str(model), "--prompt", "hello", "--no-cache"]
    argv += ["--max-new-tokens", "2"] + (["--ladder", "16,32"] if command == "run" else [])
    assert main(argv) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "token ids out of the vocabulary [0, 1000): [5000]" in line


# -- 15: --shape ----------------------------------------------------------------------------------


def _dyn_onnx(path: Path) -> Path:
    """x of shape [?, 8] -> Relu."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_shape_suggestion_keeps_static_dims_and_works(tmp_path):
    model = _dyn_onnx(tmp_path / "dyn.onnx")
    proc = _cli([*PROFILE, "--model", str(model), "--out", str(tmp_path / "o")])
    assert proc.returncode == 2
    line = _one_line_error(proc.stderr, "profile-compile")
    assert "--shape x=[1,8]" in line
    suggested = line.split("--shape ", 1)[1].split()[0]
    proc = _cli(
        [*PROFILE, "--model", str(model), "--shape", suggested, "--out", str(tmp_path / "o")]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_repeated_shape_is_refused(tmp_path, capsys):
    model = _dyn_onnx(tmp_path / "dyn.onnx")
    argv = ["--model", str(model), "--shape", "x=[1,8]", "--shape", "x=[2,8]"]
    assert profile_main([*argv, "--no-pass-profile", "--out", str(tmp_path / "o")]) == 2
    line = _one_line_error(capsys.readouterr().err, "profile-compile")
    assert "--shape x is given twice" in line
    assert not (tmp_path / "o").exists()


# -- 16: meta-devices -----------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["AUTO", "AUTO:CPU", "HETERO:CPU", "MULTI:CPU", "BATCH:CPU"])
def test_meta_devices_are_refused_up_front(device, capsys):
    assert main([*RUN, "--device", device]) == 2
    captured = capsys.readouterr()
    line = _one_line_error(captured.err)
    assert f"--device {device}: meta-devices" in line and "CPU" in line.rsplit(":", 1)[1]
    assert "model:" not in captured.err and "Not Implemented" not in captured.err


# -- 17: flags that were silently ignored or misread --------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*RUN[:3], "--ladder", "auto", "--max-context", "40"],
         "--max-context 40: the top rung must be a multiple of 16"),
        ([*RUN, "--max-context", "64"], "--max-context is for --ladder auto"),
        ([*RUN, "--inject-worker-fault", "32:raise", "--compile-placement", "in-process"],
         "--inject-worker-fault needs --compile-placement worker"),
        ([*RUN, "--inject-worker-fault", "16:raise", "--compile-placement", "worker"],
         "--inject-worker-fault 16: the worker compiles only the rungs after the first"),
        ([*RUN, "--schedule", "i1", "--inject-worker-fault", "32:raise",
          "--compile-placement", "worker"], "only one-ahead schedules (i2, i3) use the worker"),
        ([*RUN, "--steps-per-slice", "-1"], "--steps-per-slice must be >= 1, got -1"),
        (["ab", "compile", "--arm", "A=current,fp32", "--arm", "B=current", "--model", "tiny"],
         "--arm A: fp32 does not exist, and the item is not KEY=VALUE"),
        ([*AB_SCHEDULE, "--command", "run {schedule} --out {out} --tokens {decode}"],
         "--command: unknown placeholder(s) {decode}; known: {schedule}"),
    ],
    ids=["max-context-rounded", "max-context-ignored", "worker-fault-in-process",
         "worker-fault-first-rung", "worker-fault-eager-schedule", "steps-per-slice",
         "arm-item-without-equals", "command-placeholder"],
)  # fmt: skip
def test_flags_that_would_be_ignored_or_misread_are_refused(argv, message, tmp_path, capsys):
    if argv[0] == "ab":
        argv = [*argv, "--out", str(tmp_path / "res")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in _one_line_error(captured.err)
    assert "model:" not in captured.err
    assert not (tmp_path / "res").exists()


# -- 18: Ctrl-C delivered to a helper thread ------------------------------------------------------

_INTERRUPTED_CHILD = textwrap.dedent(
    """
    import signal, sys, threading, time
    import compile_ahead
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.compile.worker.client import CompileWorker
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.sources.base import ReopenSpec

    placement = CompileWorker(tmp_dir=sys.argv[1])
    placement.start()
    # A thread that does not block SIGINT, as a library's thread: the kernel may hand a
    # process-directed Ctrl-C to it; pthread_kill makes that happen on purpose.
    bystander = threading.Thread(target=time.sleep, args=(600,), daemon=True)
    bystander.start()

    def interrupt_later():
        time.sleep(1.0)
        signal.pthread_kill(bystander.ident, signal.SIGINT)

    threading.Thread(target=interrupt_later, daemon=True).start()
    print("compiling", flush=True)
    t0 = time.monotonic()
    try:
        placement.compile(ReopenSpec("tiny"), GraphSpec(32, 1, "f32"),
                          CompileOptions("CPU", "f32", "f32"), timeout_s=600, fault="hang")
    except KeyboardInterrupt:
        print(f"interrupted after {time.monotonic() - t0:.1f} s", flush=True)
        sys.exit(130)
    """
)


def test_ctrl_c_on_a_helper_thread_ends_a_wait_for_the_worker_promptly(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPTED_CHILD, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Without the fix the main thread sleeps in select() until the 600 s deadline.
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 130, err[-3000:]
    assert "interrupted after" in out
    assert not list(tmp_path.iterdir())  # the worker's unnamed files went with it


def test_ctrl_c_on_another_thread_ends_a_wait_for_an_ab_trial_promptly():
    """The same window in `ab`: the main thread waits for a trial process's output."""
    import threading

    from compile_ahead.profiling.trials.runner import run_bounded

    bystander = threading.Thread(target=time.sleep, args=(60,), daemon=True)
    bystander.start()
    timer = threading.Timer(1.0, signal.pthread_kill, (bystander.ident, signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_bounded(["sleep", "30"], timeout_s=None)  # without the fix: 30 s, then raised
    assert time.monotonic() - t0 < 10


def test_helper_threads_of_a_run_leave_ctrl_c_to_the_main_thread():
    from compile_ahead.interrupts import start_helper_thread

    seen: list[set[int]] = []
    start_helper_thread(
        lambda: seen.append(set(signal.pthread_sigmask(signal.SIG_BLOCK, []))), "probe"
    ).join()
    assert {signal.SIGINT, signal.SIGTERM} <= seen[0]
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # main untouched


# -- 19: py-spy beside the interpreter ------------------------------------------------------------


@pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed for this Python")
def test_py_spy_is_found_without_the_venv_on_path(tmp_path):
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # the venv not activated
    out = tmp_path / "o"
    argv = [*PROFILE, "--model", "tiny", "--ladder", "16", "--py-spy", "--out", str(out)]
    proc = _cli(argv, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "py-spy:" in proc.stdout
    assert json.loads((out / "report.json").read_text())["pyspy"]["spans"] > 0


# -- also seen: a worker crash and its retry on the console ---------------------------------------


def test_a_crashed_worker_and_its_retry_are_in_the_summary(capsys):
    argv = [*RUN, "--compile-placement", "worker", "--inject-worker-fault", "32:segfault"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "boundary 16->32: the background compile failed (compile worker" in out
    assert "killed by SIGSEGV" in out and "compiled again in the foreground" in out
