"""Run a plan: every trial is a fresh subprocess that writes one JSON result file.

An arm is a command plus environment. The command may use the placeholders {out} (the JSON
path the trial must write), {arm} and {index}; the same values are also in the environment as
CA_TRIAL_OUT, CA_TRIAL_ARM and CA_TRIAL_INDEX. Each finished trial is appended to
``trials.jsonl`` in the output directory at once, so a failure or an interrupt keeps every
completed trial on disk; the failure is then raised as one clear error.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.interrupts import WAIT_SLICE_S
from compile_ahead.output.atomic import writing
from compile_ahead.profiling.results_format.record_values import record_problem

# The trial log's record type and reader belong to the results format (records.py); the
# engine's callers find them here too.
from compile_ahead.profiling.results_format.records import TRIALS_LOG as TRIALS_LOG
from compile_ahead.profiling.results_format.records import InvalidTrial as InvalidTrial
from compile_ahead.profiling.results_format.records import TrialRecord as TrialRecord
from compile_ahead.profiling.results_format.records import (
    invalid_trial_warning as invalid_trial_warning,
)
from compile_ahead.profiling.results_format.records import load_records as load_records
from compile_ahead.profiling.trials.design import Plan, TrialSlot

# Seconds a trial may run before it counts as hung: generous for the largest preset's full
# protocol on a CPU, so only a hang (not a slow arm) hits it. --timeout changes it.
DEFAULT_TRIAL_TIMEOUT_S = 7200.0


@dataclass(frozen=True)
class Finished:
    returncode: int | None  # None: killed at the time limit
    stdout: str
    stderr: str


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_bounded(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout_s: float | None,
) -> Finished:
    """Run ``command`` in its own process group and collect its output. At the time limit, or
    when we are interrupted, the whole group is killed: a wrapper script's children hold the
    output pipes, and killing only the wrapper would leave us waiting on them for ever."""
    proc = subprocess.Popen(
        list(command),
        env=None if env is None else dict(env),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        # In slices, so a Ctrl-C the kernel handed to another thread is acted on promptly;
        # communicate() keeps what it read across a TimeoutExpired.
        while True:
            left = WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
            try:
                out, err = proc.communicate(timeout=max(0.0, min(left, WAIT_SLICE_S)))
                break
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a member left the group and kept the pipes
            proc.kill()
            out, err = "", ""
        return Finished(None, out or "", err or "")
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    return Finished(proc.returncode, out, err)


@dataclass(frozen=True)
class Arm:
    name: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # added to (or replacing) os.environ
    unset_env: tuple[str, ...] = ()  # removed from the inherited environment
    cwd: str | None = None
    info: Mapping[str, object] = field(default_factory=dict)  # what the arm is, for reports

    def describe(self) -> dict:
        return {
            "name": self.name,
            "command": list(self.command),
            "env": dict(self.env),
            "unset_env": list(self.unset_env),
            **dict(self.info),
        }


class TrialFailed(CompileAheadError):
    """A trial exited non-zero, timed out or wrote no valid JSON; completed trials are kept."""

    def __init__(self, message: str, records: list[TrialRecord]):
        super().__init__(message)
        self.records = records


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _last_line(text: str) -> str:
    stripped = text.strip().splitlines()
    return stripped[-1] if stripped else ""


def _fill(part: str, values: Mapping[str, str]) -> str:
    for key, value in values.items():
        part = part.replace("{" + key + "}", value)
    return part


def run_one(arm: Arm, slot: TrialSlot, out_dir: Path, timeout_s: float | None) -> TrialRecord:
    kind = "warmup" if slot.warmup else f"b{slot.block:02d}"
    result_path = out_dir / f"trial-{slot.index:03d}-{kind}-{arm.name}.json"
    result_path.unlink(missing_ok=True)
    values = {"out": str(result_path), "arm": arm.name, "index": str(slot.index)}
    env = {k: v for k, v in os.environ.items() if k not in arm.unset_env}
    env.update(arm.env)
    env.update({"CA_TRIAL_OUT": values["out"], "CA_TRIAL_ARM": arm.name})
    env["CA_TRIAL_INDEX"] = values["index"]
    command = [_fill(part, values) for part in arm.command]
    started = time.time()
    t0 = time.perf_counter()
    record = TrialRecord(
        slot.index, slot.block, slot.position, arm.name, slot.warmup, None, 0.0, started,
        str(result_path), None,
    )  # fmt: skip
    try:
        proc = run_bounded(command, env=env, cwd=arm.cwd, timeout_s=timeout_s)
    except OSError as err:
        record.wall_s = time.perf_counter() - t0
        record.error = f"could not start {command[0]!r}: {err.strerror or err}"
        return record
    except BaseException:  # interrupted: a trial with no record leaves no files either
        remove_trial_files(result_path)
        raise
    record.wall_s = time.perf_counter() - t0
    record.stderr_tail = _tail(proc.stderr)
    if proc.returncode is None:
        record.error = f"timed out after {timeout_s:g} s (--timeout); its processes were killed"
        return record
    record.returncode = proc.returncode
    if proc.returncode != 0:
        last = _last_line(proc.stderr) or _last_line(proc.stdout) or "no output"
        record.error = f"exit code {proc.returncode}: {last}"
        return record
    try:
        loaded = json.loads(result_path.read_text())
    except FileNotFoundError:
        record.error = f"exited 0 but wrote no result to {result_path}"
        return record
    except json.JSONDecodeError as err:
        record.error = f"result {result_path} is not valid JSON: {err}"
        return record
    if not isinstance(loaded, dict):
        record.error = f"result {result_path} is not a JSON object"
        return record
    loaded.setdefault("trial_wall_s", record.wall_s)
    problem = record_problem(record.to_dict() | {"result": loaded})
    if problem is not None:
        record.error = f"result {result_path}: {problem}"
        return record
    record.result = loaded
    return record


def remove_trial_files(result_path: Path) -> None:
    """Whatever an unfinished trial wrote beside its result (``trial-...json``, its
    ``.passes``, a failed sibling, an atomic write's temporary file), the result too."""
    stem = result_path.stem
    for path in (*result_path.parent.glob(f"{stem}.*"), *result_path.parent.glob(f".{stem}.*")):
        with contextlib.suppress(OSError):
            path.unlink()


def run_plan(
    plan: Plan,
    arms: Sequence[Arm],
    out_dir: Path,
    *,
    timeout_s: float | None = DEFAULT_TRIAL_TIMEOUT_S,
    progress: Callable[[TrialRecord, int], None] | None = None,
) -> list[TrialRecord]:
    """Run every slot of ``plan`` in order; returns the records (warm-ups included).
    ``timeout_s`` None lets a trial run for ever."""
    if [a.name for a in arms] != list(plan.arms):
        raise CompileAheadError("the arms do not match the plan's arms")
    if timeout_s is not None and not 0 < timeout_s < math.inf:
        raise CompileAheadError(f"the trial timeout must be positive seconds, got {timeout_s}")
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / TRIALS_LOG
    with writing(log):
        log.write_text("")
    records: list[TrialRecord] = []
    slots = plan.slots
    for slot in slots:
        record = run_one(arms[slot.arm], slot, out_dir, timeout_s)
        records.append(record)
        with writing(log), log.open("a") as fh:
            fh.write(json.dumps(record.to_dict(), allow_nan=False) + "\n")
        if progress is not None:
            progress(record, len(slots))
        if record.error is not None:
            done = sum(1 for r in records if r.error is None)
            where = "warm-up" if slot.warmup else f"block {slot.block}"
            raise TrialFailed(
                f"trial {slot.index} (arm {record.arm}, {where}) failed: {record.error}; "
                f"{done} completed trial(s) kept in {log}",
                records,
            )
    return records
