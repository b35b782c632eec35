"""`compile-ahead campaign run` on grids too large to run: refused at once, before anything is
written, naming the grid's size and the limit; a large grid within the limits says how far its
cells' checks are while they run."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from campaign_helpers import campaign_command, run
from sleep_trial import campaign_toml

from compile_ahead.commands.ab import check_cell
from compile_ahead.profiling.campaigns.definition.spec import load_spec
from compile_ahead.runtime.ladder.settings.batch_bound import MAX_BATCH

REFUSED_WITHIN_S = 60.0  # a refusal reads the file and multiplies: seconds, even under load


def grid(path: Path, ladders: int, configs: int = 1, pairs: int = 1) -> Path:
    """A sleeping schedule campaign of ``ladders`` x ``configs`` cells and ``pairs`` pairs."""
    values = ", ".join(f'"{64 + 16 * i},{80 + 16 * i}"' for i in range(ladders))
    configs_axis = ", ".join(f'["NUM_STREAMS={i + 1}"]' for i in range(configs))
    text = campaign_toml(0.1, cells=1, pairs=pairs)
    text = text.replace('ladder = ["64,128"]', f"ladder = [{values}]\nov_config = [{configs_axis}]")
    path.write_text(text)
    return path


def _refused(tmp_path: Path, spec: Path) -> str:
    before = sorted(tmp_path.iterdir())
    started = time.monotonic()
    proc = run(campaign_command("run", str(spec), "--store", str(tmp_path / "s.sqlite")),
               tmp_path, timeout=REFUSED_WITHIN_S)  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert time.monotonic() - started < REFUSED_WITHIN_S
    assert sorted(tmp_path.iterdir()) == before  # no store, no lock, no block folder
    return lines[0]


def test_a_huge_pair_count_is_refused_at_once(tmp_path: Path) -> None:
    line = _refused(tmp_path, grid(tmp_path / "huge.toml", 2, pairs=99999999999999))
    assert line.endswith(
        "huge.toml: 2 cell(s) x 99,999,999,999,999 pair(s) make 199,999,999,999,998 blocks; "
        "a campaign has at most 100,000 (fewer pairs, or several campaigns)"
    ), line


def test_more_blocks_than_the_limit_are_refused(tmp_path: Path) -> None:
    line = _refused(tmp_path, grid(tmp_path / "g.toml", 100, configs=2, pairs=501))
    assert "200 cell(s) x 501 pair(s) make 100,200 blocks; a campaign has at most 100,000" in line


@pytest.mark.slow
def test_more_cells_than_the_limit_are_refused(tmp_path: Path) -> None:
    line = _refused(tmp_path, grid(tmp_path / "wide.toml", 1001, configs=10))
    assert "wide.toml: the axes make 10,010 cells; a campaign has at most 10,000" in line


@pytest.mark.slow
def test_a_large_grid_says_how_far_its_checks_are(tmp_path: Path) -> None:
    spec = grid(tmp_path / "large.toml", 1000, configs=10, pairs=10)  # at both limits
    store = tmp_path / "no-such-folder" / "s.sqlite"  # refused once every cell is checked
    started = time.monotonic()
    proc = run(campaign_command("run", str(spec), "--store", str(store)), tmp_path, timeout=900)
    took = time.monotonic() - started
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert lines[0] == "campaign: checking the 10,000 cells ...", proc.stderr
    assert re.fullmatch(r"campaign: 10,000 cells checked in \d+ s", lines[-2]), proc.stderr
    assert "is not a directory" in lines[-1]
    steps = [int(m[1].replace(",", "")) for m in map(_step, lines[1:-2])]
    assert steps == sorted(steps) and all(0 < n < 10_000 for n in steps), proc.stderr
    assert len(steps) <= took / 2 + 1  # throttled: at most one line every 2 s
    assert not tmp_path.joinpath("no-such-folder").exists()


def test_progress_lines_come_at_most_one_per_interval_after_the_first(monkeypatch):
    """The grid above is checked in a few seconds, too fast for a line between the first and
    the last: the throttle is driven here by a clock of half a second a cell (2 s a line)."""
    import io

    from compile_ahead.profiling.campaigns.definition.validation import limits

    clock = iter(0.5 * i for i in range(100))
    monkeypatch.setattr(limits.time, "monotonic", lambda: next(clock))
    out, total = io.StringIO(), limits.PROGRESS_FROM_CELLS
    progress = limits.CheckProgress(out, every_s=2.0)
    for checked in range(1, 21):
        progress(checked, total)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"campaign: checking the {total:,} cells ..."
    assert lines[1:] == [f"campaign: {k} of {total:,} cells checked ..." for k in (5, 9, 13, 17)]


def _step(line: str) -> re.Match[str]:
    found = re.fullmatch(r"campaign: ([\d,]+) of 10,000 cells checked \.\.\.", line)
    assert found, line
    return found


def _batches(path: Path, values: str) -> Path:
    """A sleeping schedule campaign of one ladder and these batch axis values."""
    text = campaign_toml(0.1, cells=1, pairs=1).replace("[axes]", f"[axes]\nbatch = {values}")
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("values", "got"), [("[100000000]", 100000000), ("[4097]", 4097), ("[1, 8, 4097]", 4097)]
)
def test_a_batch_beyond_the_bound_is_refused_before_anything_is_written(tmp_path, values, got):
    """As `run --batch` refuses it: not a store, a blocks folder and a block that hangs."""
    spec = _batches(tmp_path / "b.toml", values)
    line = _refused(tmp_path, spec)
    assert line == (
        f"compile-ahead: error: {spec}: axis batch must be in 1..{MAX_BATCH} (sequences stepped "
        f"together), got {got}"
    )
    assert not (tmp_path / "s.sqlite").exists() and not (tmp_path / "s.sqlite.blocks").exists()


def test_a_batch_at_the_bound_passes_the_spec_check(tmp_path: Path) -> None:
    spec = load_spec(_batches(tmp_path / "b.toml", f"[1, {MAX_BATCH}]"), check_cell)
    assert [c.axes["batch"] for c in spec.cells] == [1, MAX_BATCH]
    assert ("--batch", str(MAX_BATCH)) == spec.cells[1].argv[6:8]
