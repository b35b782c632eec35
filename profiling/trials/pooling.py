"""Pooling runs of one `ab` experiment into one analysis, each trial counted once.

A trial is identified by what it measured, not by the directory its record was read from: the
same run named twice (another spelling, a symlink), a `cp -r` copy of it, or a pooled directory
beside one of its own inputs hold the same trials, and pooling them twice would count their
pairs twice (and make a confidence interval narrower than the data allow).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.format_version import FORMAT_KEY
from compile_ahead.profiling.trials.runner import TrialRecord

# What may differ between runs of one experiment that are pooled: how many pairs each ran, its
# warm-ups (not analysed), where in the design it started (a campaign's blocks, pooled in
# order, continue the first run's design), where earlier pooling came from, and the command
# line that started each (its --out at least), and the results format it was written in.
_POOLED_FREELY = (
    "pairs", "warmup", "first_block", "pooled_from", "pooled_interpreters", "pooled_repeats",
    "invocation", FORMAT_KEY,
)  # fmt: skip


def trial_identity(record: TrialRecord) -> str:
    """A digest of what identifies a trial wherever its record is read: its arm, start time,
    wall time, exit and measured values. Its index, block and result path are left out (a
    pooled directory renumbers them; a copy moves the path). Trials of different experiments
    are never pooled (checked first), so the arm's command adds nothing here."""
    fields = {
        "arm": record.arm,
        "started_unix": record.started_unix,
        "wall_s": record.wall_s,
        "returncode": record.returncode,
        "result": record.result,
        "error": record.error,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def _check_same_experiment(directories: list[Path], experiments: list[dict]) -> None:
    """Runs of different experiments (arms, commands, model, workload) are refused, naming
    what differs."""
    first = experiments[0]
    for directory, exp in zip(directories[1:], experiments[1:], strict=True):
        differ = [
            key
            for key in sorted(set(first) | set(exp))
            if key not in _POOLED_FREELY
            and first.get(key) != exp.get(key)
            and not (
                key == "arms"
                and _arms_key(first["arms"], directories[0]) == _arms_key(exp["arms"], directory)
            )
        ]
        if differ:
            raise CompileAheadError(
                f"{directory}: another experiment than {directories[0]} ({', '.join(differ)} "
                f"{'differs' if len(differ) == 1 else 'differ'}); only runs of one experiment "
                "are pooled"
            )


@dataclasses.dataclass
class _Pool:
    """Measured trials pooled so far, each under the pooled block it went to."""

    records: list[TrialRecord] = dataclasses.field(default_factory=list)
    placed: dict[str, tuple[int, str]] = dataclasses.field(default_factory=dict)  # block, dir
    blocks: int = 0

    def add_run(self, directory: Path, pairs: int, records: list[TrialRecord]) -> None:
        """A run's blocks: a block holding a trial already pooled goes where that trial went
        (its other trials join it), any other planned block becomes a new pooled block."""
        by_block: dict[int, list[TrialRecord]] = {b: [] for b in range(pairs)}
        for r in records:
            if r.block not in by_block:
                raise CompileAheadError(
                    f"{directory}: trial {r.index} ({r.arm}) is in block {r.block}, but the "
                    f"experiment plans {pairs} pairs: its trial log and experiment.json do not "
                    "belong together"
                )
            by_block[r.block].append(r)
        for trials in by_block.values():
            ids = [trial_identity(r) for r in trials]
            known = [self.placed[i][0] for i in ids if i in self.placed]
            target = known[0] if known else self.blocks
            self.blocks += not known
            for r, i in zip(trials, ids, strict=True):
                if i not in self.placed:
                    self.placed[i] = (target, str(directory))
                    self.records.append(
                        dataclasses.replace(r, index=len(self.records), block=target)
                    )


def pool_experiments(
    directories: list[Path],
    experiments: list[dict],
    records: list[list[TrialRecord]],
    note: Callable[[str], None] = _note,
) -> tuple[dict, list[TrialRecord]]:
    """Runs of one experiment as one: their measured pairs one after another (blocks and
    trial indexes renumbered, warm-ups left out), each trial once. Inputs holding trials
    already pooled from an earlier one are named in one ``note`` line and in
    ``pooled_repeats``; one that adds nothing is left out of ``pooled_from``."""
    _check_same_experiment(directories, experiments)
    pool, repeats = _Pool(), []
    used: list[tuple[Path, dict]] = []
    for directory, exp, recs in zip(directories, experiments, records, strict=True):
        measured = [r for r in recs if not r.warmup]
        seen = [pool.placed[i][1] for i in map(trial_identity, measured) if i in pool.placed]
        if seen:
            where = ", ".join(dict.fromkeys(seen))
            repeats.append(f"{directory} ({len(seen)} of {len(measured)} trials, from {where})")
        if measured and len(seen) == len(measured):
            continue
        pool.add_run(directory, exp["pairs"], measured)
        used.append((directory, exp))
    sources = [str(directory) for directory, _ in used]
    pooled_exp = experiments[0] | {"pairs": pool.blocks, "warmup": 0, "pooled_from": sources}
    if repeats:  # named in the report too
        pooled_exp["pooled_repeats"] = repeats
        note(f"note: trials an earlier input holds are pooled once: {'; '.join(repeats)}")
    interpreters = [str((exp["arms"][0].get("command") or ["?"])[0]) for _, exp in used]
    if len(set(interpreters)) > 1:  # named in the report: the runs' code may differ
        pooled_exp["pooled_interpreters"] = interpreters
    return pooled_exp, pool.records


def _arms_key(arms: list[dict], directory: Path) -> list[dict]:
    """What makes arms the same across runs: their commands without the interpreter that
    starts them (a schedule run's is the Python that ran `ab`, e.g. another virtual
    environment's; a compile run's arms also name theirs, and those names are compared) and
    with the files a run wrote into its own directory for its arms (however the path was
    spelled when it ran) named by a placeholder."""

    def in_run_dir(part: str) -> str:
        path = Path(part)
        if "/" in part and path.name and (directory / path.name).is_file():
            return f"{{dir}}/{path.name}"
        return part

    def key(arm: dict) -> dict:
        command = [in_run_dir(str(part)) for part in arm.get("command", [])]
        return arm | {"command": command[1:]}

    return [key(arm) for arm in arms]
