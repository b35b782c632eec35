"""No command writes an output over one of its inputs: an output path that is an input, a file
inside an input directory, or a directory an input is in is refused in one line before any
work (exit 2), however it is spelled (another name, ``./``, a symbolic link on the way, a hard
link), and the input is left as it was. Through the public commands."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from campaign_helpers import sleep_spec
from cli import COMPILE_AHEAD
from compare_fixtures import synthetic_experiment

from conftest import one_line_error

CLI = list(COMPILE_AHEAD)


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, cwd=cwd, timeout=600)


def _digests(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _refused(done: subprocess.CompletedProcess[str], out: str) -> str:
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_line_error(done.stderr)
    assert f"{Path(out)}: " in line and "reads" in line, line
    return line


def _spell(name: str, tmp_path: Path) -> str:
    """An output naming a file of the results directory ab1, spelled as ``name`` says."""
    if name == "symlinked directory":
        (tmp_path / "link").symlink_to("ab1")
        return "link/trials.jsonl"
    if name == "hard link":
        os.link(tmp_path / "ab1" / "trials.jsonl", tmp_path / "page.html")
        return "page.html"
    if name == "hard link named as the page":
        os.link(tmp_path / "ab1" / "trials.jsonl", tmp_path / "ab1" / "compare.html")
        return "ab1/compare.html"
    return name


SPELLINGS = [
    "ab1/trials.jsonl",
    "ab1/experiment.json",
    "./ab1/../ab1/trials.jsonl",
    "symlinked directory",
    "hard link",
    "hard link named as the page",
]


@pytest.mark.parametrize("name", SPELLINGS)
def test_compare_never_writes_its_page_over_the_results_it_reads(name, tmp_path):
    synthetic_experiment(tmp_path / "ab1", aa=False)
    out = _spell(name, tmp_path)
    before = _digests(tmp_path / "ab1")
    _refused(_cli("compare", "ab1", "--out", out, cwd=tmp_path), out)
    assert _digests(tmp_path / "ab1") == before


def test_compare_still_writes_its_page_into_the_results_directory(tmp_path):
    synthetic_experiment(tmp_path / "ab1", aa=False)
    for argv in (["ab1"], ["ab1"], ["ab1", "--out", "ab1/compare.html"], ["./ab1"]):
        done = _cli("compare", *argv, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "ab1" / "compare.html").read_text().startswith("<!")


@pytest.fixture(scope="module")
def store(sleep_campaign_store) -> Path:
    """A campaign store of sleeping trials, run by the public command (conftest.py's)."""
    return sleep_campaign_store


def test_compare_and_campaign_report_never_write_over_the_store(store, tmp_path):
    shutil.copyfile(store, tmp_path / "c.sqlite")
    os.link(tmp_path / "c.sqlite", tmp_path / "other.html")
    before = _digests(tmp_path)
    for out in ("c.sqlite", "./c.sqlite", "other.html"):
        _refused(_cli("compare", "c.sqlite", "--out", out, cwd=tmp_path), out)
    sub = tmp_path / "sub"
    sub.mkdir()
    os.replace(tmp_path / "other.html", sub / "c.sqlite")  # a report directory holding it
    _refused(_cli("campaign", "report", "sub/c.sqlite", "--out", "sub", cwd=tmp_path), "sub")
    os.replace(sub / "c.sqlite", tmp_path / "other.html")
    assert _digests(tmp_path) == before
    assert _cli("compare", "c.sqlite", cwd=tmp_path).returncode == 0


def test_campaign_run_never_makes_its_spec_the_store(tmp_path):
    spec = sleep_spec(tmp_path / "c.toml", 0.0)
    before = spec.read_bytes()
    _refused(_cli("campaign", "run", "c.toml", "--store", "./c.toml", cwd=tmp_path), "c.toml")
    assert spec.read_bytes() == before


def test_run_never_writes_its_report_or_trace_over_the_model(tiny_qwen2_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_qwen2_dir, model)
    before = _digests(model)
    run_argv = ["run", "--model", "model", "--ladder", "tiny", "--no-progress", "--no-cache"]
    for flag in ("--report", "--trace"):
        done = _cli(*run_argv, flag, "model/config.json", cwd=tmp_path)
        _refused(done, "model/config.json")
        assert "model:" not in done.stderr  # refused before the model was opened
    config = tmp_path / "props.json"
    config.write_text('{"CPU": {"INFERENCE_NUM_THREADS": "1"}}')
    argv = [*run_argv, "--ov-config-file", "props.json", "--report", "props.json"]
    _refused(_cli(*argv, cwd=tmp_path), "props.json")
    assert _digests(model) == before
    assert config.read_text() == '{"CPU": {"INFERENCE_NUM_THREADS": "1"}}'
    entry = tmp_path / "cache" / "ab" / "entry.ovblob"  # a compile cache entry
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"compiled")
    cached = ["run", "--model", "model", "--ladder", "tiny", "--no-progress", "--cache-dir"]
    _refused(_cli(*cached, "cache", "--trace", str(entry), cwd=tmp_path), str(entry))
    assert entry.read_bytes() == b"compiled"


SIDE_SUFFIXES = ["-wal", "-shm", "-journal"]


def _report_argv(out: str) -> list[str]:
    return ["campaign", "report", "c.sqlite", "--out", out, "--no-plot"]


@pytest.mark.parametrize("present", [False, True], ids=["absent", "present"])
@pytest.mark.parametrize("suffix", SIDE_SUFFIXES)
@pytest.mark.parametrize("command", ["compare", "campaign report"])
def test_an_output_at_a_stores_sqlite_side_file_is_refused(
    store, tmp_path, command, suffix, present
):
    """SQLite makes and deletes STORE-wal, -shm and -journal as it opens and closes the store:
    an output there, while the store is closed (no such file) or open, is refused, and the next
    command that opens the store finds it as it was."""
    shutil.copyfile(store, tmp_path / "c.sqlite")
    out = f"c.sqlite{suffix}"
    if present:
        (tmp_path / out).write_bytes(b"")
    before = _digests(tmp_path)
    argv = ["compare", "c.sqlite", "--out", out] if command == "compare" else _report_argv(out)
    line = _refused(_cli(*argv, cwd=tmp_path), out)
    assert "SQLite" in line and "c.sqlite" in line, line
    assert _digests(tmp_path) == before
    assert (tmp_path / out).exists() == present


@pytest.mark.parametrize("suffix", SIDE_SUFFIXES)
def test_an_output_at_a_side_file_is_refused_however_it_is_spelled(store, tmp_path, suffix):
    """Another spelling of the name (``./``, a linked directory, an absolute path), or an
    output directory inside that name, is the side file's name all the same."""
    shutil.copyfile(store, tmp_path / "c.sqlite")
    (tmp_path / "sub").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path, target_is_directory=True)
    before = _digests(tmp_path)
    for out in (f"./sub/../c.sqlite{suffix}", f"alias/c.sqlite{suffix}",
                str(tmp_path / f"c.sqlite{suffix}")):  # fmt: skip
        _refused(_cli("compare", "c.sqlite", "--out", out, cwd=tmp_path), out)
    inside = f"c.sqlite{suffix}/report"
    _refused(_cli(*_report_argv(inside), cwd=tmp_path), inside)
    assert _digests(tmp_path) == before and not (tmp_path / f"c.sqlite{suffix}").exists()


def test_a_name_like_the_side_file_of_another_store_is_an_output_as_any(store, tmp_path):
    """Only the side files of a store the command reads are its inputs."""
    shutil.copyfile(store, tmp_path / "c.sqlite")
    done = _cli("compare", "c.sqlite", "--out", "d.sqlite-wal", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "d.sqlite-wal").read_text().startswith("<!")
