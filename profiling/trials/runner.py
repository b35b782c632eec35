"""Run a plan: every trial is a fresh subprocess that writes one JSON result file.

An arm is a command plus environment. The command may use the placeholders {out} (the JSON
path the trial must write), {arm} and {index}; the same values are also in the environment as
CA_TRIAL_OUT, CA_TRIAL_ARM and CA_TRIAL_INDEX. Each finished trial is appended to
``trials.jsonl`` in the output directory at once, so a failure or an interrupt keeps every
completed trial on disk; the failure is then raised as one clear error.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from compile_ahead.errors import CompileAheadError

from .design import Plan, TrialSlot

TRIALS_LOG = "trials.jsonl"


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


@dataclass
class TrialRecord:
    index: int
    block: int
    position: int
    arm: str
    warmup: bool
    returncode: int | None
    wall_s: float  # process wall time seen by the runner (spawn to exit)
    started_unix: float
    result_path: str
    result: dict | None
    error: str | None = None
    stderr_tail: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


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
        proc = subprocess.run(
            command,
            env=env,
            cwd=arm.cwd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        record.wall_s = time.perf_counter() - t0
        record.error = f"timed out after {timeout_s:g} s"
        stderr = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else ""
        record.stderr_tail = _tail(stderr or "")
        return record
    except OSError as err:
        record.wall_s = time.perf_counter() - t0
        record.error = f"could not start {command[0]!r}: {err.strerror or err}"
        return record
    record.wall_s = time.perf_counter() - t0
    record.returncode = proc.returncode
    record.stderr_tail = _tail(proc.stderr)
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
    record.result = loaded
    return record


def run_plan(
    plan: Plan,
    arms: Sequence[Arm],
    out_dir: Path,
    *,
    timeout_s: float | None = None,
    progress: Callable[[TrialRecord, int], None] | None = None,
) -> list[TrialRecord]:
    """Run every slot of ``plan`` in order; returns the records (warm-ups included)."""
    if [a.name for a in arms] != list(plan.arms):
        raise CompileAheadError("the arms do not match the plan's arms")
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / TRIALS_LOG
    log.write_text("")
    records: list[TrialRecord] = []
    slots = plan.slots
    for slot in slots:
        record = run_one(arms[slot.arm], slot, out_dir, timeout_s)
        records.append(record)
        with log.open("a") as fh:
            fh.write(json.dumps(record.to_dict()) + "\n")
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


def load_records(out_dir: Path) -> list[TrialRecord]:
    """Read back ``trials.jsonl`` (e.g. to analyse the trials a failed run completed)."""
    path = out_dir / TRIALS_LOG
    if not path.exists():
        raise CompileAheadError(f"{path}: no trial log")
    return [TrialRecord(**json.loads(line)) for line in path.read_text().splitlines() if line]
