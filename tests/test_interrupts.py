"""Ctrl-C, SIGTERM and SIGHUP through the public commands: one way from a command's first line
to its exit; an interrupted run says what it waits for, writes no entry for work it abandoned,
and a second signal ends the wait leaving no temporary file; reports say what is true of the
cache; an interrupted trial or compile is named as such and leaves no half-written file.

Every test signals a child process at a phase it finds by polling (child_process.py).
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from child_process import CLI, PROFILE, SIGNAL_IDS, SIGNALS, Child, no_crash, sibling_or_self
from trace_processor import NodeTraceProcessor, unavailable_reason

from compile_ahead.profiling.perfetto.validate import validate_trace
from compile_ahead.profiling.trials.runner import load_records

# -- 14: from the first line -----------------------------------------------------------------

# A command line, and a library it loads as it starts (the phase to signal in).
STARTS = {
    "compile-ahead": ([*CLI, "run", "--model", "tiny", "--ladder", "tiny"], "_multiarray_umath"),
    "profile-compile": ([*PROFILE, "--model", "tiny", "--ladder", "16"], "_multiarray_umath"),
}


@pytest.mark.parametrize("sig", SIGNALS, ids=SIGNAL_IDS)
@pytest.mark.parametrize("prog", sorted(STARTS))
def test_a_signal_while_a_command_starts_ends_it_with_one_line(prog, sig, tmp_path):
    """A command imports numpy and openvino first: a signal then ends the command as it does
    later on (130, one line), never with a KeyboardInterrupt traceback or, for SIGTERM and
    SIGHUP, killed without a word."""
    argv, library = STARTS[prog]
    with Child([*argv, "--out", str(tmp_path / "out")] if prog == "profile-compile" else argv) as c:
        c.wait_until(lambda: c.mapped(library), f"{library} loaded")
        c.signal(sig)
        code = c.finish()
    assert code == 130, c.err[-3000:]
    assert no_crash(c.err) and c.lines[-1] == f"{prog}: interrupted"


# -- 16: SIGHUP is SIGTERM is Ctrl-C ---------------------------------------------------------


@pytest.mark.parametrize("sig", SIGNALS, ids=SIGNAL_IDS)
def test_each_signal_ends_a_decoding_run_with_its_report_and_its_trace(sig, tmp_path):
    report, trace = tmp_path / "r.json", tmp_path / "t.pftrace"
    argv = [*CLI, "run", "--model", "tiny", "--ladder", "tiny", "--step-delay", "0.05"]
    argv += ["--no-cache", "--report", str(report), "--trace", str(trace)]
    with Child(argv) as child:
        child.wait_for_line(lambda line: line.startswith("progress:"), "decoding")
        child.signal(sig)
        code = child.finish()
    assert code == 130 and no_crash(child.err), child.err[-3000:]
    assert sibling_or_self(report).exists(), child.err[-3000:]
    assert json.loads(sibling_or_self(report).read_text())["stop_reason"] == "interrupted"
    assert validate_trace(sibling_or_self(trace)).ok
    assert not list(tmp_path.glob("*.partial")) and not list(tmp_path.glob(".*"))


# A run over a good earlier report and trace, signalled at random moments (seeded, so each
# CI run tries the same ones): a phase of the run, found by polling, then a random delay within
# the time that phase took in an uninterrupted run (what the moment hits varies with the load).
RANDOM_POINTS_SEED = 29
RANDOM_POINTS = 12
GOOD_PAIR, FAILED_PAIR = ["r.json", "t.pftrace"], ["r.failed.json", "t.failed.pftrace"]


def _random_run(where: Path) -> list[str]:
    argv = [*CLI, "run", "--model", "tiny", "--ladder", "tiny", "--step-delay", "0.02"]
    return [
        *argv,
        "--no-cache",
        "--report",
        str(where / GOOD_PAIR[0]),
        "--trace",
        str(where / GOOD_PAIR[1]),
    ]


@functools.cache
def _interpreter_start_s() -> float:
    """How long this interpreter takes to reach the command's first line (the fastest of
    three starts that load what `python -m compile_ahead.commands` loads before it notes
    signals): a signal sooner meets no code of the command's, which no program can handle."""
    probe = [sys.executable, "-c", "import compile_ahead.early_signals"]
    starts = []
    for _ in range(3):
        t0 = time.monotonic()
        subprocess.run(probe, check=True)
        starts.append(time.monotonic() - t0)
    return min(starts)


def _phases(child: Child, where: Path) -> list[Callable[[], None]]:
    """Waits for each phase of the run to begin: the command's start (its first line
    running), its trace opened (the model not resolved yet), the model resolved (the run
    about to begin), decoding."""
    return [
        lambda: time.sleep(_interpreter_start_s()),
        lambda: child.wait_until(lambda: any(where.glob("*.partial")), "the trace opened"),
        lambda: child.wait_for_line(lambda line: line.startswith("model:"), "the model"),
        lambda: child.wait_for_line(lambda line: line.startswith("progress:"), "decoding"),
    ]


def _phase_seconds(where: Path) -> list[float]:
    """How long each phase took in the run, uninterrupted, in ``where`` (the last: to its exit)."""
    with Child(_random_run(where)) as child:
        times = []
        for wait in _phases(child, where):
            wait()
            times.append(time.monotonic())
        assert child.finish() == 0, child.err[-3000:]
        times.append(time.monotonic())
    return [b - a for a, b in itertools.pairwise(times)]


def _check_pair(where: Path, names: list[str], tp_reason: str | None) -> dict:
    """A report and its trace: the trace valid for our validator and, where it runs, for
    Perfetto's trace processor, with a decode slice per token the report counts."""
    report = json.loads((where / names[0]).read_text())
    checked = validate_trace(where / names[1])
    assert checked.ok, checked.summary()
    if tp_reason is None:
        with NodeTraceProcessor.open(where / names[1]) as tp:
            assert tp.error_stats() == []
            decoded = tp.scalar("select count(*) from slice where name = 'decode'")
        assert decoded == report["tokens_decoded"]
    return report


def _outcome(where: Path, good: Path, code: int, tp_reason: str | None) -> str:
    """What a signalled run left in ``where`` (a copy of ``good``), checked."""
    names = sorted(p.name for p in where.iterdir())  # no .partial, no temporary file
    kept = [(where / p).read_bytes() == (good / p).read_bytes() for p in GOOD_PAIR]
    if FAILED_PAIR[0] in names or FAILED_PAIR[1] in names:
        assert code == 130 and names == sorted(GOOD_PAIR + FAILED_PAIR) and all(kept), names
        assert _check_pair(where, FAILED_PAIR, tp_reason)["stop_reason"] == "interrupted"
        return "interrupted"
    assert names == GOOD_PAIR, names
    if all(kept):  # no run began: nothing written
        assert code == 130
        return "not begun"
    assert not any(kept)  # the run completed first: its outputs replace the earlier ones
    assert _check_pair(where, GOOD_PAIR, tp_reason)["stop_reason"] == "completed"
    return "completed"


@pytest.mark.slow
def test_a_signal_at_any_moment_leaves_a_good_report_and_trace_and_no_crash(tmp_path):
    """Signalled anywhere from its start to its exit, `run --report --trace` exits 130 (0 when
    it finished first) without a crash or a temporary file left, never touches the good
    outputs of an earlier run, and either began no run and wrote nothing, or wrote the report
    of what ran and its trace together: both beside the good ones when it was interrupted, both
    over them when it had completed; the trace valid, with a slice per token decoded."""
    good = tmp_path / "good"
    good.mkdir()
    spans = _phase_seconds(good)
    tp_reason = unavailable_reason()
    _check_pair(good, GOOD_PAIR, tp_reason)
    rng = random.Random(RANDOM_POINTS_SEED)
    outcomes = []
    for point in range(RANDOM_POINTS):
        where = tmp_path / f"point-{point}"
        shutil.copytree(good, where)
        sig, phase = rng.choice(SIGNALS), point % len(spans)
        delay = rng.uniform(0, spans[phase])
        with Child(_random_run(where)) as child:
            _phases(child, where)[phase]()
            time.sleep(delay)  # the moment to signal: the point of this test
            child.signal(sig)
            code = child.finish()
        what = f"{sig.name} {delay:.2f} s into phase {phase}"
        assert code in (0, 130) and no_crash(child.err), f"{what}: {child.err[-3000:]}"
        try:
            outcomes.append(_outcome(where, good, code, tp_reason))
        except AssertionError as err:
            raise AssertionError(f"{what}: {err}; stderr:\n{child.err[-3000:]}") from err
    assert "interrupted" in outcomes, outcomes  # the moments reached runs, not only their ends


# -- 15 and 13: what an interrupted run waits for, and what its report says -----------------

WAITING = (
    "compile-ahead: interrupted: finishing the cache entry of decode C=64 (Ctrl-C again to skip)"
)
GIVEN_UP = "not stored: interrupted while it was written (nothing left in the cache)"


def _run_storing(tmp_path: Path, store_delay_s: float) -> tuple[list[str], Path, Path]:
    """i2 decoding rung 64 while its entry is written (slowly: --inject-store-delay) and rung
    128 compiles in the background (late: --inject-compile-delay)."""
    cache, report = tmp_path / "cache", tmp_path / "r.json"
    argv = [*CLI, "run", "--model", "tiny", "--schedule", "i2", "--ladder", "64,128"]
    argv += ["--prompt-len", "8", "--step-delay", "0.1", "--inject-compile-delay", "1"]
    argv += ["--inject-store-delay", str(store_delay_s), "--cache-dir", str(cache)]
    return [*argv, "--report", str(report)], cache, report


def _writing(cache: Path) -> bool:
    return bool(list(cache.glob("??/.*")))  # an entry's temporary file


def _jobs(report: Path) -> list[dict]:
    return json.loads(sibling_or_self(report).read_text())["compile_jobs"]


def test_an_interrupted_run_finishes_the_entry_it_writes_says_so_and_starts_no_other(tmp_path):
    argv, cache, report = _run_storing(tmp_path, store_delay_s=6)
    with Child(argv) as child:
        child.wait_until(lambda: _writing(cache), "rung 64's entry being written")
        child.signal(signal.SIGTERM)
        child.wait_for_line(lambda line: "interrupted:" in line, "what the run waits for")
        code = child.finish()
    assert code == 130 and no_crash(child.err), child.err[-3000:]
    assert WAITING in child.lines
    assert not _writing(cache)
    # Rung 64's entry was finished and is reported stored; rung 128, compiled while the run
    # waited, was abandoned: no entry, no record saying otherwise.
    stored = [(j["capacity"], j["chunk"]) for j in _jobs(report) if j["cache_stored"]]
    assert stored == [(64, 1)]
    assert len(list(cache.glob("??/*.ovblob"))) == 1


def test_a_second_signal_ends_the_wait_at_once_leaving_no_temporary_file(tmp_path):
    argv, cache, report = _run_storing(tmp_path, store_delay_s=3600)  # only a signal ends it
    with Child(argv) as child:
        child.wait_until(lambda: _writing(cache), "rung 64's entry being written")
        child.signal(signal.SIGTERM)
        child.wait_for_line(lambda line: line == WAITING, "what the run waits for")
        child.signal(signal.SIGINT)
        code = child.finish()
    assert code == 130 and no_crash(child.err), child.err[-3000:]
    assert [p for p in cache.rglob("*") if p.is_file()] == []
    (rung,) = [j for j in _jobs(report) if (j["capacity"], j["chunk"]) == (64, 1)]
    assert rung["cache"] == "miss" and rung["cache_stored"] is False
    assert rung["cache_note"] == GIVEN_UP


# -- helper threads: a compile still running when the command ends ------------------------------


def test_helper_threads_are_known_while_they_run():
    from compile_ahead.interrupts import helpers_running, start_helper_thread

    release = threading.Event()
    thread = start_helper_thread(lambda: release.wait(60), "probe-helper")
    assert "probe-helper" in helpers_running()
    release.set()
    thread.join(60)
    assert "probe-helper" not in helpers_running()


# `compile-ahead run` whose accounting raises at the fifth step: a bug mid-run, while the
# successor rung compiles in the background.
BUGGY_RUN = """
import sys
from compile_ahead.commands import main
from compile_ahead.runtime.ladder.reporting.accounting import RunAccounting

step = RunAccounting.step
def buggy_step(self, token_index, *args):
    if token_index == 5:
        raise ValueError("a bug in an observer")
    step(self, token_index, *args)
RunAccounting.step = buggy_step
sys.argv = ["compile-ahead", *sys.argv[1:]]
main.entry()
"""


def test_a_bug_during_a_run_ends_with_its_traceback_and_report_never_an_abort(tmp_path):
    """An error no command step turned into a message is a bug: its traceback is printed and
    the process exits 1 at once (exit_process), with the failed run's report written, never
    tearing OpenVINO down under the work the bug cut short ("terminate called ...")."""
    report = tmp_path / "r.json"
    argv = ["run", "--model", "tiny", "--ladder", "tiny", "--no-cache", "--report", str(report)]
    done = subprocess.run(
        [sys.executable, "-c", BUGGY_RUN, *argv], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.rstrip().endswith("ValueError: a bug in an observer"), done.stderr[-3000:]
    assert "terminate called" not in done.stderr
    failed = json.loads((tmp_path / "r.failed.json").read_text())
    assert failed["error"] == "ValueError: a bug in an observer"


PROMPT = ",".join(str(i) for i in range(1, 41))
# The first rungs (a run's; generate's decode graph), compiled on a thread of the run's
# placement while the prompt is prefilled.
BACKGROUND_COMPILES = {
    "run": ["run", "--model", "tiny", "--ladder", "64,128", "--prompt-len", "40"],
    "generate": ["generate", "--model", "tiny", "--prompt-ids", PROMPT, "--max-new-tokens", "8"],
}


@pytest.mark.parametrize("command", sorted(BACKGROUND_COMPILES))
def test_an_interrupt_while_a_graph_compiles_in_the_background_exits_130(command, tmp_path):
    args, thread = BACKGROUND_COMPILES[command], "compile-first-rungs"
    cache = tmp_path / "cache"
    argv = [*CLI, *args, "--prefill-shape", "static", "--prefill-chunk", "8"]
    argv += ["--decode-compile", "during-prefill", "--cache-dir", str(cache)]
    with Child(argv) as child:
        child.wait_until(lambda: child.has_thread(thread), f"the {thread} thread")
        child.signal(signal.SIGINT)
        code = child.finish()
    assert code == 130 and no_crash(child.err), child.err[-3000:]
    assert not list(cache.glob("??/.*"))  # no entry left half-written


# -- 17: an interrupted trial or compile -------------------------------------------------------


def test_an_interrupted_profile_compile_says_interrupted_not_failed(tmp_path):
    out = tmp_path / "out"
    argv = [*PROFILE, "--model", "tiny", "--ladder", "16,32,64,128", "--out", str(out)]
    with Child(argv) as child:
        child.wait_for_line(lambda line: line.startswith("compiling C=16 "), "a compile")
        child.signal(signal.SIGINT)
        code = child.finish()
    assert code == 130 and no_crash(child.err), child.err[-3000:]
    # Every compile says how it ended: done, or interrupted (the one the signal cut short;
    # none if it came between two), never failed.
    started = [
        line for line in child.lines if re.fullmatch(r"compiling C=\d+ for CPU \.\.\.", line)
    ]
    ended = [
        line
        for line in child.lines
        if re.fullmatch(r"compiling C=\d+ for CPU: \w+ in [\d.]+ s", line)
    ]
    assert len(started) == len(ended) and started, child.err[-3000:]
    assert {line.split(": ")[1].split()[0] for line in ended} <= {"done", "interrupted"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.failed"]  # no staging left


def test_an_interrupted_ab_compile_leaves_no_file_of_a_trial_it_has_no_record_of(tmp_path):
    out = tmp_path / "res"
    argv = [*CLI, "ab", "compile", "--arm", "A=current", "--arm", "B=current", "--model"]
    argv += ["tiny", "--ladder", "16,32", "--pairs", "20", "--warmup", "0", "--pass-profile"]
    with Child([*argv, "--out", str(out)], stdout=subprocess.DEVNULL) as child:
        child.wait_until(lambda: bool(list(out.glob("trial-*.passes"))), "a trial's passes")
        child.signal(signal.SIGINT)
        code = child.finish()
    assert code == 130, child.err[-3000:]
    recorded = {Path(r.result_path).stem for r in load_records(out, warn=lambda _: None)}
    left = [p.name for p in (*out.glob("trial-*"), *out.glob(".trial-*"))]
    assert [name for name in left if name.lstrip(".").split(".")[0] not in recorded] == []
