"""`campaign status`: blocks done of all, failures with their reason, blocks in flight, the
coordinator (if one runs), and an ETA from the blocks' median wall on the last run's nodes."""

from __future__ import annotations

import statistics
from pathlib import Path

from compile_ahead.profiling.campaigns.coordinator import duration
from compile_ahead.profiling.campaigns.store import Store, coordinator_running
from compile_ahead.shown_text import shown


def status_text(store_path: Path) -> str:
    store = Store.open(store_path)
    try:
        return "\n".join(map(shown, _lines(store, store_path)))  # a line each, as written
    finally:
        store.close()


def _lines(store: Store, store_path: Path) -> list[str]:
    conn = store.conn
    cells = conn.execute("SELECT COUNT(*) FROM cells").fetchone()[0]
    total = cells * int(store.meta("pairs") or 0)
    done = conn.execute(
        "SELECT started, ended FROM blocks WHERE status = 'done' ORDER BY ended"
    ).fetchall()
    complete = conn.execute(
        "SELECT COUNT(*) FROM (SELECT cell FROM blocks WHERE status = 'done' GROUP BY cell "
        "HAVING COUNT(*) = ?)",
        (int(store.meta("pairs") or 0),),
    ).fetchone()[0]
    failed = store.failed_blocks()
    counts = dict(conn.execute("SELECT status, COUNT(*) FROM blocks GROUP BY status").fetchall())
    holder = coordinator_running(store_path)
    lines = [
        f"campaign {store.meta('name')} ({store.meta('kind')}), store {store_path}",
        f"blocks: {len(done)} done of {total} ({100 * len(done) / max(total, 1):.0f}%); cells "
        f"complete: {complete} of {cells}",
        f"in flight: {counts.get('submitted', 0) if holder else 0}; interrupted earlier (run "
        f"again): {counts.get('interrupted', 0)}; failed attempts: {len(failed)}",
        f"coordinator: {holder or 'none running'}",
    ]
    walls = [r["ended"] - r["started"] for r in done]
    left = total - len(done)
    if left and walls:
        nodes = int(store.meta("parallelism") or 1)
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
