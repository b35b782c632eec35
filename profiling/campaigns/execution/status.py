"""`campaign status`: the grid's axes, blocks done of all, failures with their reason, blocks
in flight, the coordinator (if one runs), and an ETA from the blocks' median wall on the last
run's nodes.

Blocks are counted, not rows (a block interrupted twice has two rows), by their latest attempt.
A block is in flight only while the coordinator that submitted it holds the store's lock: a row
left 'submitted' by a coordinator that is gone (killed, SIGKILL included, before it could mark
it) is an interrupted block, which the next run marks and runs again.
"""

from __future__ import annotations

import json
import re
import sqlite3
import statistics
from collections import Counter
from pathlib import Path

from compile_ahead.profiling.campaigns.execution.coordinator import duration
from compile_ahead.profiling.campaigns.persistence.store import Store
from compile_ahead.profiling.campaigns.persistence.store_lock import HOLDER_KEY, coordinator_running
from compile_ahead.shown_text import shown


def status_text(store_path: Path) -> str:
    running = coordinator_running(store_path)  # before the store is open (store_lock.py)
    store = Store.open(store_path)
    try:
        return "\n".join(map(shown, _lines(store, store_path, running)))  # a line each
    finally:
        store.close()


def _lines(store: Store, store_path: Path, running: bool) -> list[str]:
    conn = store.conn
    spec = store.campaign
    cells = conn.execute("SELECT COUNT(*) FROM cells").fetchone()[0]
    total = cells * spec.pairs
    done = conn.execute(
        "SELECT started, ended FROM blocks WHERE status = 'done' ORDER BY ended"
    ).fetchall()
    complete = conn.execute(
        "SELECT COUNT(*) FROM (SELECT cell FROM blocks WHERE status = 'done' GROUP BY cell "
        "HAVING COUNT(*) = ?)",
        (spec.pairs,),
    ).fetchone()[0]
    failed = store.failed_blocks()
    holder = (store.meta(HOLDER_KEY) or "another process") if running else None
    counts = _block_counts(store, holder)
    lines = [
        f"campaign {spec.name} ({spec.kind}), store {store_path}",
        f"axes: {_axes_text(conn)}",
        f"blocks: {len(done)} done of {total} ({100 * len(done) / max(total, 1):.0f}%); cells "
        f"complete: {complete} of {cells}",
        f"in flight: {counts['in flight']}; interrupted earlier (run again): "
        f"{counts['interrupted']}; failed attempts: {len(failed)}",
        f"coordinator: {holder or 'none running'}",
    ]
    walls = [r["ended"] - r["started"] for r in done]
    left = total - len(done)
    if left and walls:
        nodes = spec.parallelism
        eta = left * statistics.median(walls) / nodes
        lines.append(
            f"ETA: {duration(eta)} for {left} block(s) at {statistics.median(walls):.0f} s "
            f"median per block on {nodes} node(s)"
        )
    for f in failed:
        lines.append(
            f"  failed: cell {f['cell']} ({f['label']}) block {f['block']} on "
            f"{f['host'] or '?'}: {f['error']}"
        )
    return lines


def _axes_text(conn: sqlite3.Connection) -> str:
    """Each axis with its values across the cells, in the spec's order (e.g. batch: 1 | 2)."""
    values: dict[str, list[str]] = {}
    for (axes,) in conn.execute("SELECT axes FROM cells ORDER BY idx"):
        for axis, value in json.loads(axes).items():
            text = ("+".join(map(str, value)) or "none") if isinstance(value, list) else str(value)
            if text not in values.setdefault(axis, []):
                values[axis].append(text)
    return "; ".join(f"{axis}: {' | '.join(v)}" for axis, v in values.items()) or "none"


def _block_counts(store: Store, holder: str | None) -> Counter[str]:
    """Blocks not done, by their latest attempt: 'in flight' (submitted by the coordinator
    running now) or 'interrupted' (marked so, or submitted by one that is gone)."""
    latest: dict[tuple[int, int], tuple[str, str]] = {}
    done: set[tuple[int, int]] = set()
    rows = store.conn.execute("SELECT cell, block, status, coordinator FROM blocks ORDER BY id")
    for cell, block, status, coordinator in rows:
        latest[(cell, block)] = (status, coordinator)
        if status == "done":
            done.add((cell, block))
    # the store names its lock's holder "pid N on HOST since ...", a row its coordinator
    # "pid N on HOST"
    running = re.match(r"pid \d+ on \S+", holder or "")
    counts: Counter[str] = Counter({"in flight": 0, "interrupted": 0})
    for key, (status, coordinator) in latest.items():
        if key in done:
            continue
        if status == "submitted" and holder is not None:
            mine = running is None or running.group(0) == coordinator
            counts["in flight" if mine else "interrupted"] += 1
        elif status in ("submitted", "interrupted"):
            counts["interrupted"] += 1
    return counts
