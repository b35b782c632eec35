"""Full-disk side of tests/test_campaigns_local.py, run where DIR is a small tmpfs of its own
(a mount namespace): a campaign whose store is on DIR runs until two blocks are done, then the
file system is filled; once the coordinator has ended, the space is freed and the campaign is
run again. What it saw goes to RESULT.json.

    python campaign_full_disk_driver.py DIR RESULT.json
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from cli import command
from sleep_trial import campaign_toml

DEADLINE_S = 600.0


def _rows(store: Path) -> list:
    with sqlite3.connect(store) as conn:
        return conn.execute("SELECT id, cell, block, status, started, ended FROM blocks").fetchall()


def _fill(path: Path) -> None:
    with path.open("wb") as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 20))
                fh.flush()
        except OSError:
            pass


def main(directory: str, result_path: str) -> int:
    root = Path(directory)
    spec = root / "sleep.toml"
    spec.write_text(campaign_toml(1.0, cells=2, pairs=3))
    store = root / "s.sqlite"
    run = command("campaign", "run", spec, "--store", store)
    proc = subprocess.Popen(run, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and proc.poll() is None:
        if store.exists() and sum(r[3] == "done" for r in _rows(store)) >= 2:
            break
        time.sleep(0.2)
    _fill(root / "filler")
    full = {"returncode": proc.wait(timeout=DEADLINE_S), "stderr": proc.stderr.read()}
    with sqlite3.connect(store) as conn:
        full["integrity"] = conn.execute("PRAGMA integrity_check").fetchone()[0]
    full["rows"] = _rows(store)
    (root / "filler").unlink()
    again = subprocess.run(run, capture_output=True, text=True, timeout=DEADLINE_S)
    result = {"full": full, "again": {"returncode": again.returncode, "stderr": again.stderr}}
    with sqlite3.connect(store) as conn:
        result["integrity"] = conn.execute("PRAGMA integrity_check").fetchone()[0]
        result["trials"] = conn.execute(
            "SELECT b.cell, b.block, COUNT(t.id) FROM blocks b LEFT JOIN trials t "
            "ON t.block_id = b.id WHERE b.status = 'done' GROUP BY b.id"
        ).fetchall()
    result["rows"] = _rows(store)
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
