"""Outputs never replace what they should not: only regular files are created or replaced
(devices, FIFOs, sockets, symbolic links and directories are refused before any work, and
looked at again before the rename), a failed or interrupted run writes beside a good output,
an output directory holding the user's files is never replaced, names of any legal length
work, and modes follow the umask without widening a replaced file's. Through the public
commands, checking exit codes, messages and the file system left behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cli import COMPILE_AHEAD, profile_compile_command, run_profile_compile

from compile_ahead.commands.main import main
from compile_ahead.commands.profile_compile import main as profile_main
from compile_ahead.profiling.perfetto.validate import validate_trace
from conftest import one_line_error as _one_line_error
from conftest import start_decoding_run

CLI = list(COMPILE_AHEAD)
RUN = ["run", "--model", "tiny", "--ladder", "16,32", "--prompt-len", "4", "--no-progress"]
RUN += ["--no-cache"]
SLOW_RUN = ["run", "--model", "tiny", "--ladder", "tiny", "--step-delay", "0.05", "--no-cache"]
AB_SCHEDULE = ["ab", "schedule", "--model", "tiny", "--arms", "i1,i2", "--ladder", "64,128"]
AB_SCHEDULE += ["--prompt-len", "8"]


def _identity(path: Path) -> tuple[int, int, int, int]:
    """What the node at ``path`` itself is (a symbolic link not followed)."""
    st = os.lstat(path)
    return st.st_mode, st.st_ino, st.st_rdev, st.st_size


# -- nodes that are not regular files -----------------------------------------------------------


def _char_device(path: Path) -> str:
    """A stand-in for /dev/null (the real one is never touched)."""
    if os.geteuid() != 0:
        pytest.skip(reason="making a character device (mknod) needs root")
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return "a character device"


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "a FIFO"


def _socket(path: Path) -> str:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()  # the socket file stays
    return "a socket"


def _file_link(path: Path) -> str:
    (path.parent / "real").mkdir()
    (path.parent / "real" / "report.json").write_text("the link's target")
    path.symlink_to("real/report.json")
    return "a symbolic link (to real/report.json)"


def _dir_link(path: Path) -> str:
    (path.parent / "real").mkdir()
    path.symlink_to("real")
    return "a symbolic link (to real)"


FILE_NODES: dict[str, Callable[[Path], str]] = {
    "char-device": _char_device,
    "fifo": _fifo,
    "socket": _socket,
    "symlink": _file_link,
}
DIR_NODES: dict[str, Callable[[Path], str]] = {
    "char-device": _char_device,
    "fifo": _fifo,
    "symlink": _dir_link,
}


def _refused_before_any_work(node: Path, flag: str, kind: str, err: str, prog: str) -> None:
    line = _one_line_error(err, prog)
    assert f"{flag} {node}: " in line and kind in line, line
    assert "model:" not in err  # refused before any work


@pytest.mark.parametrize("node_kind", sorted(FILE_NODES))
@pytest.mark.parametrize("flag", ["--report", "--trace"])
def test_run_refuses_output_files_that_are_not_regular_files(flag, node_kind, tmp_path, capsys):
    node = tmp_path / "out.json"
    kind = FILE_NODES[node_kind](node)
    before = _identity(node)
    everything = sorted(p.name for p in tmp_path.rglob("*"))
    assert main([*RUN, flag, str(node)]) == 2
    _refused_before_any_work(node, flag, kind, capsys.readouterr().err, "compile-ahead")
    assert _identity(node) == before
    assert sorted(p.name for p in tmp_path.rglob("*")) == everything
    if node_kind == "symlink":
        assert (tmp_path / "real" / "report.json").read_text() == "the link's target"


def test_run_refuses_a_failed_sibling_that_is_not_a_regular_file(tmp_path, capsys):
    """A failed run would write r.failed.json: that path is checked before any work too."""
    os.mkfifo(tmp_path / "r.failed.json")
    assert main([*RUN, "--report", str(tmp_path / "r.json")]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert f"{tmp_path / 'r.failed.json'}, which is a FIFO" in line
    assert stat.S_ISFIFO(os.lstat(tmp_path / "r.failed.json").st_mode)
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("node_kind", sorted(DIR_NODES))
@pytest.mark.parametrize("command", ["profile-compile", "ab"])
def test_output_directories_that_are_not_directories_are_refused(
    command, node_kind, tmp_path, capsys
):
    node = tmp_path / "out"
    kind = DIR_NODES[node_kind](node)
    before = _identity(node)
    if command == "profile-compile":
        assert profile_main(["--model", "tiny", "--ladder", "16", "--out", str(node)]) == 2
    else:
        assert main([*AB_SCHEDULE, "--out", str(node)]) == 2
    prog = "profile-compile" if command == "profile-compile" else "compile-ahead"
    _refused_before_any_work(node, "--out", kind, capsys.readouterr().err, prog)
    assert _identity(node) == before
    if node_kind == "symlink":
        assert list((tmp_path / "real").iterdir()) == []  # nothing written through the link


def test_an_output_that_stops_being_a_regular_file_is_not_replaced(tmp_path):
    """Checked before the work and again at the rename: a FIFO made at the report's path
    during the run is left as it is, and the report is kept and named."""
    report = tmp_path / "r.json"
    proc = start_decoding_run([*SLOW_RUN, "--report", str(report)])
    os.mkfifo(report)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err[-3000:]
    line = _one_line_error(err)
    assert f"{report}: is now a FIFO, not replaced" in line
    assert stat.S_ISFIFO(os.lstat(report).st_mode)
    kept = Path(line.rsplit(" kept in ", 1)[1])
    assert kept.parent == tmp_path
    assert json.loads(kept.read_text())["stop_reason"] == "completed"


# -- a failed or interrupted run ------------------------------------------------------------------


def test_an_interrupted_run_never_replaces_a_good_report_or_trace(tmp_path):
    report, trace = tmp_path / "good.json", tmp_path / "good.pftrace"
    argv = [*SLOW_RUN, "--report", str(report), "--trace", str(trace)]
    done = subprocess.run([*CLI, *argv, "--step-delay", "0"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    good = {p: p.read_bytes() for p in (report, trace)}
    proc = start_decoding_run(argv)  # the same command, interrupted while it decodes
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    assert {p: p.read_bytes() for p in (report, trace)} == good
    failed = json.loads((tmp_path / "good.failed.json").read_text())
    assert failed["stop_reason"] == "interrupted"
    assert validate_trace(tmp_path / "good.failed.pftrace").ok
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["good.json", "good.pftrace", "good.failed.json", "good.failed.pftrace"]
    )


# -- an output directory the user added files to ------------------------------------------------


def test_profile_out_never_replaces_files_the_user_added_to_an_earlier_profile(tmp_path):
    out = tmp_path / "prof"
    first = run_profile_compile("--model", "tiny", "--ladder", "16", "--out", out)
    assert first.returncode == 0, first.stderr[-3000:]
    (out / "notes.md").write_text("my notes")
    (out / "plots").mkdir()
    (out / "plots" / "fig.png").write_bytes(b"my plot")
    earlier = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    again = run_profile_compile("--model", "tiny", "--ladder", "16", "--out", out)
    assert again.returncode == 2
    line = _one_line_error(again.stderr, "profile-compile")
    assert f"--out {out}: " in line and "notes.md" in line and "plots/" in line
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prof"]  # no staging, no .failed
    # Without the user's files it is the tool's own output again, and replaced.
    (out / "notes.md").unlink()
    (out / "plots" / "fig.png").unlink()
    (out / "plots").rmdir()
    third = run_profile_compile("--model", "tiny", "--ladder", "16", "--out", out)
    assert third.returncode == 0, third.stderr[-3000:]
    assert json.loads((out / "report.json").read_text())["error"] is None


# -- long names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [246, 255])
def test_names_up_to_the_file_systems_limit_are_written(length, tmp_path):
    report = tmp_path / ("r" * (length - 5) + ".json")
    trace = tmp_path / ("t" * (length - 8) + ".pftrace")
    done = subprocess.run(
        [*CLI, *RUN, "--report", str(report), "--trace", str(trace)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(report.read_text())["stop_reason"] == "completed"
    assert validate_trace(trace).ok
    assert sorted(tmp_path.iterdir()) == sorted([report, trace])  # no temporary file left


def test_a_failed_run_with_a_255_byte_report_name_writes_its_failed_sibling(tmp_path):
    report = tmp_path / ("r" * 250 + ".json")
    argv = ["run", "--model", "tiny", "--ladder", "tiny", "--no-progress", "--schedule", "i2"]
    argv += ["--inject-compile-failure", "64:2", "--report", str(report)]
    done = subprocess.run([*CLI, *argv], capture_output=True, text=True)
    assert done.returncode == 2
    assert "too long" not in _one_line_error(done.stderr)
    (failed,) = tmp_path.iterdir()
    assert failed.name.endswith(".failed.json") and len(failed.name) <= 255
    assert json.loads(failed.read_text())["stop_reason"].startswith("error")


def test_profile_out_with_a_250_byte_name_is_published(tmp_path):
    out = tmp_path / ("p" * 250)
    done = run_profile_compile("--model", "tiny", "--ladder", "16", "--out", out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "report.json").read_text())["error"] is None
    assert sorted(tmp_path.iterdir()) == [out]


@pytest.mark.parametrize("command", ["run", "profile-compile"])
def test_a_name_longer_than_the_file_system_allows_is_one_line_before_any_work(
    command, tmp_path, capsys
):
    path = tmp_path / ("x" * 256)
    if command == "run":
        assert main([*RUN, "--report", str(path)]) == 2
    else:
        assert profile_main(["--model", "tiny", "--ladder", "16", "--out", str(path)]) == 2
    err = capsys.readouterr().err
    prog = "compile-ahead" if command == "run" else "profile-compile"
    assert "is 256 bytes, longer than its file system allows (255)" in _one_line_error(err, prog)
    assert "model:" not in err and list(tmp_path.iterdir()) == []


# -- modes and owners -----------------------------------------------------------------------------


def _with_umask(mask: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=300, preexec_fn=lambda: os.umask(mask)
    )


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_new_outputs_follow_the_umask(tmp_path):
    report, trace, out = tmp_path / "r.json", tmp_path / "t.pftrace", tmp_path / "prof"
    done = _with_umask(0o077, [*CLI, *RUN, "--report", str(report), "--trace", str(trace)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert (_mode(report), _mode(trace)) == (0o600, 0o600)
    profile = profile_compile_command("--model", "tiny")
    done = _with_umask(0o022, [*profile, "--ladder", "16", "--out", str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert _mode(out) == 0o755 and _mode(out / "report.json") == 0o644
    done = _with_umask(0o077, [*profile, "--ladder", "16", "--out", str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert _mode(out) == 0o700 and _mode(out / "report.json") == 0o600


def test_a_replaced_report_keeps_its_narrower_mode_and_its_owner(tmp_path):
    private, shared = tmp_path / "private.json", tmp_path / "shared.json"
    for path, mode in ((private, 0o600), (shared, 0o640)):
        path.write_text("{}")
        path.chmod(mode)
    if os.geteuid() == 0:  # root replaces another user's report: it stays that user's
        os.chown(private, 4321, 4322)
    done = _with_umask(0o022, [*CLI, *RUN, "--report", str(private)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(private.read_text())["stop_reason"] == "completed"
    assert _mode(private) == 0o600
    if os.geteuid() == 0:
        assert (private.stat().st_uid, private.stat().st_gid) == (4321, 4322)
    done = _with_umask(0o077, [*CLI, *RUN, "--report", str(shared)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert _mode(shared) == 0o600  # the narrower of the file's and the umask's
