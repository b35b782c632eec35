"""`compile-ahead ab`: nothing hangs, nothing leaks, bad input is refused before any trial.

Commands that could hang run in a subprocess with a generous limit: reaching it means the
command hung (the fixed code returns at its own --timeout), so no assertion depends on speed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli import COMPILE_AHEAD

from compile_ahead.commands.main import main
from compile_ahead.profiling.trials.runner import DEFAULT_TRIAL_TIMEOUT_S, TRIALS_LOG, load_records

HANG_GUARD_S = 180  # far above any --timeout used here; only a hang reaches it
CLI = list(COMPILE_AHEAD)

# A trial command standing in for `compile-ahead run --report OUT` (argv: schedule, out).
FAKE_RUN = """
import json, sys
schedule, out = sys.argv[1], sys.argv[2]
report = {"model": "tiny", "synthetic": True, "device": "CPU", "schedule": schedule,
          "ladder": [64, 128], "foreground_compile_s": 1.0, "critical_path_s": 2.0,
          "decode_s": 1.0, "rungs": [], "boundaries": []}
with open(out, "w") as fh:
    json.dump(report, fh)
"""


def _hanging_script(path: Path, pid_file: Path) -> Path:
    """A program that starts a child holding its output pipes, records the child's pid, and
    waits for it: a wrapper script stuck at start."""
    path.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {pid_file}\nwait\n")
    path.chmod(0o755)
    return path


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has exited


@pytest.fixture
def pid_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "child.pid"
    yield path
    if path.exists():  # the code under test failed to kill it: do not leave it behind
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(path.read_text()), signal.SIGKILL)


def _cli(argv: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *argv], capture_output=True, text=True, timeout=HANG_GUARD_S, **kwargs
    )


def test_ab_compile_gives_up_on_an_interpreter_that_hangs_at_start(tmp_path, pid_file) -> None:
    hang = _hanging_script(tmp_path / "python", pid_file)
    done = _cli(
        ["ab", "compile", "--arm", f"H={hang}", "--arm", "B=current", "--model", "tiny",
         "--ladder", "16", "--timeout", "2", "--out", str(tmp_path / "res")]
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"--arm H: {hang} did not report its OpenVINO within 2 s" in done.stderr
    assert not _alive(int(pid_file.read_text()))  # the wrapper's child was killed too


def test_trial_timeout_kills_the_trial_and_its_children(tmp_path, pid_file) -> None:
    hang = _hanging_script(tmp_path / "trial.sh", pid_file)
    done = _cli(
        ["ab", "schedule", "--model", "tiny", "--arms", "i1,i2", "--ladder", "64,128",
         "--prompt-len", "8", "--pairs", "1", "--warmup", "0", "--timeout", "1",
         "--command", f"{hang} {{out}}", "--out", str(tmp_path / "res"), "--no-plot"]
    )  # fmt: skip
    assert done.returncode == 2
    assert "timed out after 1 s" in done.stderr
    assert not _alive(int(pid_file.read_text()))


def test_trials_have_a_default_timeout() -> None:
    from compile_ahead.commands.main import build_parser

    args = build_parser().parse_args(["ab", "schedule", "--model", "tiny", "--arms", "i1,i2"])
    assert args.timeout == DEFAULT_TRIAL_TIMEOUT_S and 0 < args.timeout < float("inf")


@pytest.mark.parametrize("value", ["-1", "0", "inf", "nan", "soon"])
def test_timeout_must_be_positive_seconds(capsys, value: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["ab", "schedule", "--model", "tiny", "--arms", "i1,i2", "--timeout", value])
    assert info.value.code == 2
    assert "--timeout" in capsys.readouterr().err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_killed_ab_compile_removes_its_temporary_ir(tmp_path, sig) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen(
        [*CLI, "ab", "compile", "--arm", "A=current", "--arm", "B=current", "--model", "tiny",
         "--ladder", "16", "--pairs", "20", "--warmup", "0", "--out", str(tmp_path / "res")],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    try:
        seen = []
        for line in proc.stderr:  # wait until trials run: the IR exists and is in use
            seen.append(line)
            if line.startswith("[1/"):
                break
        assert list(tmp.glob("compile-ahead-ab-ir-*")), "".join(seen)
        proc.send_signal(sig)
        proc.communicate(timeout=HANG_GUARD_S)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert not list(tmp.glob("compile-ahead-ab-ir-*"))


def test_unknown_schedule_is_refused_before_any_trial(tmp_path, capsys) -> None:
    out = tmp_path / "res"
    code = main(["ab", "schedule", "--model", "tiny", "--arms", "i1,zz", "--ladder", "64,128",
                 "--prompt-len", "8", "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "unknown schedule zz; choose from b0, b1, i1, i2, i3" in err
    assert not out.exists()  # no warm-up ran


def _schedule_results(tmp_path: Path) -> Path:
    script = tmp_path / "fake_run.py"
    script.write_text(FAKE_RUN)
    out = tmp_path / "res"
    code = main(
        ["ab", "schedule", "--model", "tiny", "--arms", "i1,i2", "--ladder", "64,128",
         "--prompt-len", "8", "--pairs", "2", "--warmup", "0", "--quiet", "--no-plot",
         "--command", f"{sys.executable} {script} {{schedule}} {{out}}", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    return out


def test_report_of_a_truncated_trial_log_keeps_the_complete_records(tmp_path, capsys) -> None:
    out = _schedule_results(tmp_path)
    log = out / TRIALS_LOG
    text = log.read_text()
    log.write_text(text[: len(text) - 40])  # killed while appending the fourth record
    capsys.readouterr()
    assert main(["ab", "report", str(out), "--no-plot"]) == 0
    err = capsys.readouterr().err
    assert f"warning: {log}:4: not a complete trial record, skipped" in err
    partial = (out / "schedule_ab_partial.md").read_text()
    assert "PARTIAL: 3 of 4 trials completed" in partial


def test_trial_log_lines_that_are_not_records_are_named(tmp_path) -> None:
    log = tmp_path / TRIALS_LOG
    good = {
        "index": 0, "block": 0, "position": 0, "arm": "A", "warmup": False, "returncode": 0,
        "wall_s": 1.0, "started_unix": 0.0, "result_path": "r.json", "result": {"value": 1.0},
    }  # fmt: skip
    log.write_text("\n".join([json.dumps(good), "[1, 2]", json.dumps({"index": 1}), ""]))
    warnings: list[str] = []
    records = load_records(tmp_path, warn=warnings.append)
    assert [r.index for r in records] == [0]
    assert [w.split(": not")[0] for w in warnings] == [f"warning: {log}:2", f"warning: {log}:3"]


def test_report_of_a_trial_log_from_another_experiment_is_one_line(tmp_path, capsys) -> None:
    """Trials of a larger experiment (a log appended to, or experiment.json replaced) are
    named, not an IndexError."""
    out = _schedule_results(tmp_path)
    log = out / TRIALS_LOG
    extra = json.loads(log.read_text().splitlines()[-1]) | {"index": 4, "block": 2}
    log.write_text(log.read_text() + json.dumps(extra) + "\n")
    capsys.readouterr()
    assert main(["ab", "report", str(out), "--no-plot"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"trial 4 ({extra['arm']}) is in block 2, but the experiment plans 2 pairs" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"kind": "schedule", "arms": [', "experiment.json: unreadable"),
        ("[]", "not an `ab` experiment"),
        ('{"kind": "schedule", "arms": [], "pairs": "2"}', "pairs is missing or not a JSON int"),
    ],
)
def test_report_of_a_corrupt_experiment_is_one_line(tmp_path, capsys, content, message) -> None:
    (tmp_path / "experiment.json").write_text(content)
    assert main(["ab", "report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


@pytest.mark.parametrize("kind", ["schedule", "compile"])
def test_ab_ladder_with_an_empty_rung_is_refused(tmp_path, capsys, kind: str) -> None:
    arms = (
        ["--arms", "i1,i2"] if kind == "schedule" else ["--arm", "A=current", "--arm", "B=current"]
    )
    out = tmp_path / "res"
    code = main(["ab", kind, "--model", "tiny", *arms, "--ladder", "64,,128", "--out", str(out)])
    assert code == 2 and "--ladder '64,,128': rung 2 is empty" in capsys.readouterr().err
    assert not out.exists()
