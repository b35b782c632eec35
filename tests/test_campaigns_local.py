"""Campaigns on this machine (the local executor), through `compile-ahead campaign`: a real
compile campaign on the tiny preset against `ab report`, and a coordinator killed (SIGKILL) or
interrupted (Ctrl-C) mid-block, then resumed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import openvino as ov
import pytest
from campaign_helpers import (
    TINY_COMPILE,
    assert_each_block_done_once,
    campaign_command,
    connect,
    done_blocks,
    integrity,
    report_matches_ab,
    run,
    sleep_spec,
)
from cli import command

DEADLINE_S = 600.0


@pytest.mark.slow
def test_compile_campaign_cells_are_what_ab_reports(tmp_path: Path) -> None:
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY_COMPILE)
    store = tmp_path / "s.sqlite"
    proc = run(campaign_command("run", str(spec), "--store", str(store)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "4/4 blocks done" in proc.stderr
    assert_each_block_done_once(store, cells=2, pairs=2, trials=2)
    with connect(store) as conn:
        # each block ran the order the cell's AB/BA design gives it
        orders = conn.execute(
            "SELECT b.block, group_concat(t.arm, '') AS arms FROM blocks b JOIN trials t "
            "ON t.block_id = b.id WHERE b.status = 'done' GROUP BY b.id ORDER BY b.block"
        ).fetchall()
        assert {(r["block"], r["arms"]) for r in orders} == {(0, "AB"), (1, "BA")}
        machines = conn.execute("SELECT data FROM fingerprints").fetchall()
    assert len(machines) == 1 and ov.get_version() in machines[0]["data"]
    status = run(campaign_command("status", str(store)), tmp_path)
    assert "blocks: 4 done of 4 (100%); cells complete: 2 of 2" in status.stdout
    report = tmp_path / "report"
    proc = run(campaign_command("report", str(store), "--out", str(report)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report_matches_ab(store, report, tmp_path) == 2
    assert (report / "forest_compile_total.png").is_file()
    assert sorted(p.name for p in report.glob("cell*/history.png")) == ["history.png"] * 2
    rows = done_blocks(store)
    again = run(campaign_command("run", str(spec), "--store", str(store)), tmp_path)
    assert again.returncode == 0 and "0 to run" in again.stderr
    assert [tuple(r) for r in done_blocks(store)] == [tuple(r) for r in rows]


TINY_BATCH = """
[campaign]
kind = "schedule"
pairs = 1
warmup = 0
arms = ["i1", "i2"]

[axes]
model = ["tiny"]
ladder = ["16,32,64"]
batch = [1, 2]

[options]
prompt-len = 12
prompt-spread = 0.25
decode-tokens = 30
"""


def test_a_batch_axis_runs_each_cell_at_its_batch(tmp_path: Path) -> None:
    """Real tiny runs: the batch-2 cell's trials decode two sequences, and the status, the
    report and the compare page name each cell's batch."""
    spec = tmp_path / "batch.toml"
    spec.write_text(TINY_BATCH)
    store = tmp_path / "s.sqlite"
    proc = run(campaign_command("run", str(spec), "--store", str(store)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_each_block_done_once(store, cells=2, pairs=1, trials=2)
    with connect(store) as conn:
        rows = conn.execute(
            "SELECT b.cell, t.result FROM trials t JOIN blocks b ON b.id = t.block_id"
        ).fetchall()
    batches = {(r["cell"], json.loads(r["result"]).get("batch")) for r in rows}
    assert batches == {(0, None), (1, 2)}  # a batch-1 run reports no batch fields
    status = run(campaign_command("status", str(store)), tmp_path)
    assert "axes: model: tiny; ladder: 16,32,64; batch: 1 | 2" in status.stdout, status.stdout
    report = tmp_path / "report"
    proc = run(campaign_command("report", str(store), "--out", str(report), "--no-plot"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    cells = json.loads((report / "campaign.json").read_text())["cells"]
    assert [c["cell"] for c in cells] == [
        "model=tiny, ladder=16,32,64, batch=1",
        "model=tiny, ladder=16,32,64, batch=2",
    ]
    batch_cell = next(report.glob("cell01-*/schedule_ab.md")).read_text()
    assert "batch 2: prompts 9,15 tokens" in batch_cell
    assert "Decode tok/s, all sequences (aggregate)" in batch_cell
    assert "sequence boundary windows" in batch_cell
    page = tmp_path / "compare.html"
    proc = run(command("compare", str(store), "--out", str(page)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "model=tiny, ladder=16,32,64, batch=2" in page.read_text()


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _count(store: Path, status: str) -> int:
    if not store.exists():
        return 0
    with connect(store) as conn:
        return conn.execute("SELECT COUNT(*) FROM blocks WHERE status = ?", (status,)).fetchone()[0]


def _ab_processes(store: Path) -> list[int]:
    """Our block processes still alive (their command names the blocks' directory)."""
    marker = str(store.with_name(store.name + ".blocks"))
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _dump(store: Path) -> list[str]:
    with connect(store) as conn:
        return list(conn.iterdump())


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_stopped_coordinator_resumes_without_rerunning_finished_blocks(
    tmp_path: Path, stop: signal.Signals
) -> None:
    release = tmp_path / "release"
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=1.5, warmup=1, release=release)
    store = tmp_path / "s.sqlite"
    first = subprocess.Popen(
        campaign_command("run", str(spec), "--store", str(store)),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait(lambda: _count(store, "done") >= 1 and _count(store, "submitted") == 1, "a block")
        before = _dump(store)
        second = run(campaign_command("run", str(spec), "--store", str(store)), tmp_path)
        lines = second.stderr.strip().splitlines()
        assert second.returncode == 2 and len(lines) == 1, second.stderr
        assert f"another coordinator runs this campaign (pid {first.pid} on" in lines[0]
        assert _dump(store) == before
        assert integrity(store) == "ok"
        os.kill(first.pid, stop)
        first.communicate(timeout=DEADLINE_S)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == (-signal.SIGKILL if stop == signal.SIGKILL else 130)
    _wait(lambda: not _ab_processes(store), "the block's processes to end with the coordinator")
    assert integrity(store) == "ok"
    # Ctrl-C marks the block in flight itself; after a SIGKILL the next run finds it in flight
    killed = stop == signal.SIGKILL
    assert (_count(store, "submitted"), _count(store, "interrupted")) == (int(killed), 1 - killed)
    kept = [tuple(r) for r in done_blocks(store)]
    release.touch()  # the blocks left run without sleeping
    proc = run(campaign_command("run", str(spec), "--store", str(store)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ("1 interrupted block(s) run again" in proc.stderr) == killed
    assert integrity(store) == "ok"
    assert_each_block_done_once(store, cells=2, pairs=2, trials=4)
    after = {(r["cell"], r["block"]): tuple(r) for r in done_blocks(store)}
    assert all(after[(row[1], row[2])] == row for row in kept)  # finished blocks untouched
    assert _count(store, "interrupted") == 1


def _status_counts(store: Path, cwd: Path) -> tuple[int, int]:
    """(in flight, interrupted earlier) as `campaign status` says them."""
    proc = run(campaign_command("status", str(store)), cwd)
    assert proc.returncode == 0, proc.stderr
    found = re.search(r"in flight: (\d+); interrupted earlier \(run again\): (\d+);", proc.stdout)
    assert found, proc.stdout
    return int(found[1]), int(found[2])


def _stop_in_first_block(spec: Path, store: Path, stop: signal.Signals) -> tuple[int, int]:
    """Run the campaign and stop its coordinator with ``stop`` inside its first block; what
    `campaign status` said while it ran."""
    # the run marks what an earlier one left in flight, then submits its first block
    marked = _count(store, "interrupted") + _count(store, "submitted")
    done = _count(store, "done")

    def running() -> bool:
        rows = (_count(store, "submitted"), _count(store, "interrupted"), _count(store, "done"))
        return rows == (1, marked, done) and bool(_ab_processes(store))

    coordinator = subprocess.Popen(
        campaign_command("run", str(spec), "--store", str(store)),
        cwd=spec.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait(running, "the first block")
        seen = _status_counts(store, spec.parent)
        os.kill(coordinator.pid, stop)
        coordinator.wait(timeout=DEADLINE_S)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    _wait(lambda: not _ab_processes(store), "the block's processes to end with the coordinator")
    return seen


@pytest.mark.slow
def test_status_counts_each_interrupted_block_once(tmp_path: Path) -> None:
    release = tmp_path / "release"
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=2.0, warmup=1, release=release)
    store = tmp_path / "s.sqlite"
    _stop_in_first_block(spec, store, signal.SIGKILL)  # its row stays 'submitted'
    assert _status_counts(store, tmp_path) == (0, 1)  # no coordinator: not in flight
    # that block run again: in flight (it or the next), no longer interrupted
    running = _stop_in_first_block(spec, store, signal.SIGINT)
    assert running[0] <= 1 and running[1] == 0, running
    assert (_count(store, "interrupted"), _count(store, "submitted")) == (2, 0)
    assert _status_counts(store, tmp_path) == (0, 1)  # one block, interrupted twice
    running = _stop_in_first_block(spec, store, signal.SIGKILL)
    assert running[0] <= 1 and running[1] == 0, running
    assert _status_counts(store, tmp_path) == (0, 1)
    release.touch()  # the blocks left run without sleeping
    proc = run(campaign_command("run", str(spec), "--store", str(store)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _status_counts(store, tmp_path) == (0, 0)  # run again and done: none left


@pytest.mark.slow
def test_blocks_from_two_machines_are_not_pooled_unless_stratified(tmp_path: Path) -> None:
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=0.2)
    store = tmp_path / "s.sqlite"
    assert run(campaign_command("run", str(spec), "--store", str(store)), tmp_path).returncode == 0
    with connect(store) as conn:  # block 1 of cell 0 as if it ran on a machine with AMX off
        data = conn.execute("SELECT data FROM fingerprints").fetchone()[0]
        conn.execute("INSERT INTO fingerprints VALUES ('0ther000', ?)", (data + " ",))
        conn.execute("UPDATE blocks SET fingerprint = '0ther000' WHERE cell = 0 AND block = 1")
    report = tmp_path / "report"
    proc = run(campaign_command("report", str(store), "--out", str(report)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = (report / "campaign.md").read_text()
    assert "blocks from 2 machine fingerprints (0ther000, " in summary
    assert sorted(p.name for p in report.glob("cell*")) == ["cell01-tiny_128-256"]
    proc = run(campaign_command("report", str(store), "--out", str(report), "--stratify"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    apart = {
        p.parent.name: json.loads(p.read_text())["endpoints"][0]["values"]["s1"]
        for p in report.glob("cell00-*/machine-*/schedule_ab_partial.json")
    }
    # each machine's report holds its own block's pair only
    assert {name: [v is not None for v in values] for name, values in apart.items()} == {
        "machine-0ther000": [False, True],
        f"machine-{_digest(store)[:8]}": [True, False],
    }


def _digest(store: Path) -> str:
    with connect(store) as conn:
        return conn.execute(
            "SELECT digest FROM fingerprints WHERE digest != '0ther000'"
        ).fetchone()[0]


def _mount_namespace_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "a small file system of its own (tmpfs in a mount namespace) needs root"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare -m fails here: {probe.stderr.strip() or probe.returncode}"
    return None


@pytest.mark.slow
def test_a_full_disk_loses_only_the_blocks_in_flight(tmp_path: Path) -> None:
    reason = _mount_namespace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    mnt, result = tmp_path / "small-disk", tmp_path / "result.json"
    mnt.mkdir()
    driver = Path(__file__).with_name("campaign_full_disk_driver.py")
    script = f'mount -t tmpfs -o size=8m tmpfs "{mnt}" && exec "$@"'
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", sys.executable, str(driver), str(mnt),
         str(result)],
        capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(result.read_text())
    full = seen["full"]
    errors = [ln for ln in full["stderr"].splitlines() if ln.startswith("compile-ahead: error:")]
    assert full["returncode"] == 2 and len(errors) == 1, full["stderr"]
    assert full["integrity"] == "ok" and seen["integrity"] == "ok"
    done_before = [r for r in full["rows"] if r[3] == "done"]
    assert len(done_before) >= 2
    assert all(r in seen["rows"] for r in done_before)  # kept as they were
    assert seen["again"]["returncode"] == 0, seen["again"]["stderr"]
    assert sorted((c, b) for c, b, _ in seen["trials"]) == [
        (c, b) for c in (0, 1) for b in range(3)
    ]
    assert {n for _, _, n in seen["trials"]} == {2}
