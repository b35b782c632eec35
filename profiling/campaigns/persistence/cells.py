"""A cell's experiment and trial log rebuilt from the store, in the form `ab report` reads.

The cell's blocks are runs of one `ab` experiment, one pair each, pooled the way `ab report
DIR... --out` pools runs (experiment.py): the first block's experiment.json with the cell's
pairs, no warm-ups (each block's own warm-ups stay in the store) and ``pooled_from`` naming
where each block ran. Unlike that pooling, a block keeps its number in the cell's design, so a
block that is missing leaves its pair empty instead of shifting the others (the runs' files
may also be on other machines, where `ab report` could not read them).

Blocks of one cell from different machine fingerprints are not pooled: an effect measured on
machines that take different code paths (AMX or not, another OpenVINO build) is not one
effect, and pooling would hide the difference inside a wider interval. The cell is reported
as refused unless asked to stratify, which reports each machine's blocks as their own
(partial) experiment.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from compile_ahead.profiling.campaigns.persistence.store import Store
from compile_ahead.profiling.results_format.campaign import trial_record
from compile_ahead.profiling.results_format.records import (
    InvalidTrial,
    TrialRecord,
    invalid_trial_warning,
)


@dataclass
class CellRun:
    index: int
    label: str
    dirname: str
    machine: str | None = None  # fingerprint digest of the blocks (None: no block done)
    experiment: dict | None = None
    records: list[TrialRecord] = field(default_factory=list)
    blocks: int = 0
    status: str | None = None  # PARTIAL text for `ab report`, None when every block is done
    refused: str | None = None  # why the cell is not analysed
    workdirs: list[str] = field(default_factory=list)  # where its blocks ran (on their node)


def _warn(message: str) -> None:
    print(message, file=sys.stderr)


def _records(store: Store, block_id: int, block: int, start: int) -> list[TrialRecord]:
    """The block's measured trials; a row whose numbers cannot be used (record_values.py) is
    left out, named by its row."""
    rows = store.conn.execute(
        "SELECT id, arm, record, result FROM trials WHERE block_id = ? AND warmup = 0 ORDER BY idx",
        (block_id,),
    )
    out: list[TrialRecord] = []
    for row in rows:
        try:
            out.append(trial_record(row["record"], row["result"], start + len(out), block))
        except InvalidTrial as err:
            where = f"{store.path}: trials row {row['id']} (block {block}, arm {row['arm']})"
            _warn(invalid_trial_warning(where, err))
        except ValueError as err:  # json.JSONDecodeError is one
            _warn(f"warning: {store.path}: trials row {row['id']}: not a trial record ({err})")
    return out


def _pooled(run: CellRun, store: Store, blocks: list, pairs: int) -> CellRun:
    first = json.loads(blocks[0]["experiment"])  # as the block's experiment.json
    sources = [f"block {b['block']} on {b['host']}:{b['workdir']}" for b in blocks]
    run.experiment = first | {"pairs": pairs, "warmup": 0, "first_block": 0, "pooled_from": sources}
    for b in blocks:
        run.records += _records(store, b["id"], b["block"], len(run.records))
    run.blocks = len(blocks)
    run.workdirs = [b["workdir"] for b in blocks]
    run.machine = blocks[0]["fingerprint"]
    if run.blocks < pairs:
        run.status = f"PARTIAL: {run.blocks} of {pairs} blocks done"
    return run


def cell_runs(store: Store, stratify: bool = False) -> list[CellRun]:
    """Per cell (and per machine when ``stratify``) what its done blocks measured."""
    pairs = store.campaign.pairs
    runs: list[CellRun] = []
    for cell in store.conn.execute("SELECT idx, label, dirname FROM cells ORDER BY idx").fetchall():
        blocks = store.conn.execute(
            "SELECT * FROM blocks WHERE cell = ? AND status = 'done' ORDER BY block",
            (cell["idx"],),
        ).fetchall()
        base = {"index": cell["idx"], "label": cell["label"], "dirname": cell["dirname"]}
        machines = sorted({b["fingerprint"] for b in blocks})
        if not blocks:
            runs.append(CellRun(**base, refused="no block done yet"))
        elif len(machines) > 1 and not stratify:
            runs.append(
                CellRun(
                    **base,
                    blocks=len(blocks),
                    refused=f"blocks from {len(machines)} machine fingerprints "
                    f"({', '.join(m[:8] for m in machines)}), not pooled; `campaign report "
                    "--stratify` analyses each machine's blocks apart",
                )
            )
        elif len(machines) == 1:
            runs.append(_pooled(CellRun(**base), store, blocks, pairs))
        else:
            for m in machines:
                group = [b for b in blocks if b["fingerprint"] == m]
                run = CellRun(**(base | {"dirname": f"{cell['dirname']}/machine-{m[:8]}"}))
                runs.append(_pooled(run, store, group, pairs))
    return runs
