"""Shared by the campaign tests: running the command, reading the store, `ab report` checks."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

from cli import command
from sleep_trial import campaign_toml

# A compile campaign of the tiny preset: 2 cells (ladders) x 2 pairs, two property sets.
TINY_COMPILE = """
[campaign]
kind = "compile"
pairs = 2
warmup = 0
arms = ["A=current", "B=current,INFERENCE_PRECISION_HINT=f32"]

[axes]
model = ["tiny"]
ladder = ["32,64", "64,128"]
"""


def sleep_spec(path: Path, seconds: float, warmup: int = 0, release: Path | None = None) -> Path:
    """A campaign of 2 cells x 2 pairs whose trials sleep ``seconds`` (sleep_trial.py), or
    until the file ``release`` exists."""
    path.write_text(
        campaign_toml(seconds, cells=2, pairs=2, warmup=warmup, release=release and str(release))
    )
    return path


def campaign_command(*argv: str) -> list[str]:
    return command("campaign", *argv)


def run(argv: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def connect(store: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(store)
    conn.row_factory = sqlite3.Row
    return conn


def integrity(store: Path) -> str:
    with connect(store) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


def done_blocks(store: Path) -> list[sqlite3.Row]:
    with connect(store) as conn:
        return conn.execute(
            "SELECT * FROM blocks WHERE status = 'done' ORDER BY cell, block"
        ).fetchall()


def assert_each_block_done_once(store: Path, cells: int, pairs: int, trials: int) -> None:
    """Every (cell, block) has one done row holding ``trials`` trials; no trial of a block that
    did not finish is kept."""
    with connect(store) as conn:
        done = conn.execute("SELECT cell, block, id FROM blocks WHERE status = 'done'").fetchall()
        assert sorted((r["cell"], r["block"]) for r in done) == [
            (c, b) for c in range(cells) for b in range(pairs)
        ]
        per_block = dict(conn.execute("SELECT block_id, COUNT(*) FROM trials GROUP BY block_id"))
        assert {r["id"]: per_block.get(r["id"]) for r in done} == {r["id"]: trials for r in done}
        unfinished = conn.execute(
            "SELECT COUNT(*) FROM trials t JOIN blocks b ON b.id = t.block_id "
            "WHERE b.status IN ('submitted', 'interrupted')"
        ).fetchone()[0]
        assert unfinished == 0


def report_matches_ab(store: Path, report_dir: Path, work: Path) -> int:
    """Each cell of the campaign report against `ab report`: the cell directory re-reported by
    `ab report` gives the same JSON, and `ab report` pooling the blocks' own `ab` directories
    (where the blocks ran) gives the same values and paired effects. Returns the cells seen."""
    cells = json.loads((report_dir / "campaign.json").read_text())["cells"]
    with connect(store) as conn:
        for n, cell in enumerate(cells):
            stem = _stem(report_dir / cell["dir"])
            ours = json.loads((report_dir / cell["dir"] / f"{stem}.json").read_text())
            again = work / f"again-{n}"
            shutil.copytree(report_dir / cell["dir"], again)
            proc = run(_ab_report(str(again)), work)
            assert proc.returncode == 0, proc.stderr
            assert json.loads((again / f"{stem}.json").read_text()) == ours
            dirs = [
                str(Path(r["workdir"]) / "ab")
                for r in conn.execute(
                    "SELECT b.workdir FROM blocks b JOIN cells c ON c.idx = b.cell "
                    "WHERE c.dirname = ? AND b.status = 'done' ORDER BY b.block",
                    (cell["dir"],),
                )
            ]
            pooled = work / f"pooled-{n}"
            proc = run(_ab_report(*dirs, "--out", str(pooled)), work)
            assert proc.returncode == 0, proc.stderr
            theirs = json.loads((pooled / f"{stem}.json").read_text())
            assert ours["design"] == theirs["design"]
            for a, b in zip(ours["endpoints"], theirs["endpoints"], strict=True):
                assert (a["key"], a["values"], a["comparisons"]) == (
                    b["key"], b["values"], b["comparisons"],
                )  # fmt: skip
    return len(cells)


def _stem(cell_dir: Path) -> str:
    return next(p.stem for p in cell_dir.glob("*_ab.json"))


def _ab_report(*argv: str) -> list[str]:
    return command("ab", "report", *argv, "--no-plot")
