"""trials.jsonl, an `ab` experiment's trial log: one JSON object a line per trial that ended
(warm-ups included), in the order they ran. Its version is its experiment.json's.

A line that is not a complete record (a run killed while appending leaves a cut-off last line),
or whose numbers cannot be used (record_values.py), is skipped and named; every other record
is read.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.results_format.record_values import record_problem

TRIALS_LOG = "trials.jsonl"


@dataclass
class TrialRecord:
    index: int  # the trial's place in the plan (0-based, warm-ups first)
    block: int  # its block (pair) in the design
    position: int  # its place within the block
    arm: str
    warmup: bool
    returncode: int | None  # None: never started, or killed at the time limit
    wall_s: float  # process wall time seen by the runner (spawn to exit)
    started_unix: float
    result_path: str  # the JSON file the trial wrote
    result: dict | None  # that file's object (None: the trial failed)
    error: str | None = None
    stderr_tail: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


class InvalidTrial(ValueError):
    """A complete trial record whose numbers cannot be used (record_values.py)."""


def invalid_trial_warning(where: str, err: InvalidTrial) -> str:
    return f"warning: {where}: invalid trial, left out of every statistic: {err}"


def parse_record(obj: object) -> TrialRecord:
    """A TrialRecord from one parsed log line (or store row); ValueError if it is not a
    complete one, InvalidTrial if its numbers cannot be used."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    known = {f.name for f in fields(TrialRecord)}
    required = {f.name for f in fields(TrialRecord) if f.default is MISSING}
    if not required <= set(obj) <= known:
        wrong = sorted((required - set(obj)) | (set(obj) - known))
        raise ValueError(f"missing or unknown keys {', '.join(wrong)}")
    record = TrialRecord(**obj)
    typed = (record.index, record.block, record.position)
    if not all(isinstance(v, int) for v in typed) or not isinstance(record.arm, str):
        raise ValueError("index, block, position or arm has the wrong type")
    problem = record_problem(obj)
    if problem is not None:
        raise InvalidTrial(problem)
    return record


def _warn(message: str) -> None:
    print(message, file=sys.stderr)


def load_records(out_dir: Path, warn: Callable[[str], None] = _warn) -> list[TrialRecord]:
    """The trial records of ``out_dir``'s trials.jsonl; ``warn`` is told each line skipped."""
    path = out_dir / TRIALS_LOG
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        raise CompileAheadError(f"{path}: no trial log") from None
    except OSError as err:
        raise CompileAheadError(f"{path}: cannot read ({err.strerror or err})") from None
    records: list[TrialRecord] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(parse_record(json.loads(line)))
        except InvalidTrial as err:
            warn(invalid_trial_warning(f"{path}:{number}", err))
        except (json.JSONDecodeError, TypeError, ValueError) as err:
            warn(f"warning: {path}:{number}: not a complete trial record, skipped ({err})")
    return records
