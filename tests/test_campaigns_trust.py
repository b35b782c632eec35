"""What a campaign trusts, through `compile-ahead campaign run|status|report`, `compare` and
`ab compile`: the blocks' folder beside the store is compile-ahead's own (a folder another user
made, one others can write, or a link is refused in one line, before anything is written); a
trial runs no code a manifest names; nothing is made or written beside a store that is refused
(no lock file, no file changed through a link); a store named by a symbolic link is refused by
every command; and one coordinator runs a store file, whatever its name."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from campaign_helpers import campaign_command, connect, integrity, run, sleep_spec
from cli import command as cli_command

from compile_ahead.profiling.campaigns.execution.block import BlockTask, run_block
from compile_ahead.profiling.campaigns.execution.models import model_identity
from compile_ahead.profiling.trials.compile_kind.exported_rungs import WORKER, export_rungs

TIMEOUT_S = 600.0


def _refused(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    """The run ended with exit 2 and one line that holds ``words``."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


def _run(spec: Path, store: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run(campaign_command("run", str(spec), "--store", str(store), "--quiet"), cwd)


def _shared_dir(parent: Path) -> Path:
    """A directory every user can write, sticky as /tmp is."""
    shared = parent / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


# -- the blocks' folder -----------------------------------------------------------------------
@pytest.mark.parametrize("plant", ["world-writable", "link"])
def test_a_blocks_folder_compile_ahead_did_not_make_is_refused(tmp_path: Path, plant: str):
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=0.1)
    store, planted = tmp_path / "s.sqlite", tmp_path / "s.sqlite.blocks"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if plant == "link":
        planted.symlink_to(elsewhere)
    else:
        planted.mkdir()
        planted.chmod(0o777)
    line = _refused(_run(spec, store, tmp_path), str(planted), "blocks' folder")
    assert ("symbolic link" if plant == "link" else "written by other users") in line
    assert not store.exists()  # refused before the store is written
    assert list(elsewhere.iterdir()) == [] and (plant == "link" or list(planted.iterdir()) == [])


def test_blocks_folders_are_private_at_every_level(tmp_path: Path) -> None:
    """Whatever the umask (002 here: files a group may write), and the store made under it is
    used again."""
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=0.1)
    command = campaign_command("run", str(spec), "--store", str(tmp_path / "s.sqlite"))
    proc = run(["sh", "-c", 'umask 002 && exec "$@"', "sh", *command], tmp_path)
    assert proc.returncode == 0, proc.stderr
    again = _run(spec, tmp_path / "s.sqlite", tmp_path)
    assert again.returncode == 0, again.stderr
    folders = [tmp_path / "s.sqlite.blocks", *(tmp_path / "s.sqlite.blocks").rglob("*")]
    folders = [p for p in folders if p.is_dir() and p.name != "ab"]  # ab/ is `ab`'s output
    assert len(folders) == 1 + 2 + 4  # the folder, 2 cells, 2 blocks each
    for folder in folders:
        st = folder.lstat()
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid(), folder


@pytest.mark.parametrize("plant", ["folder", "link"])
def test_another_users_blocks_folder_in_a_shared_directory_is_refused(
    tmp_path: Path, other_user, reachable_tmp: Path, plant: str
) -> None:
    """Another user makes STORE.blocks (or a link there) in a sticky shared directory before
    the campaign runs: the run is refused, nothing is written into their folder."""
    shared = _shared_dir(reachable_tmp)
    theirs = shared / "theirs"
    other_user.sh(f"mkdir -m 777 {theirs}")  # their own folder, which they can watch
    planted = shared / "camp.sqlite.blocks"
    if plant == "link":
        other_user.sh(f"ln -s {theirs} {planted}")
    else:
        other_user.sh(f"mkdir -m 777 {planted}")
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=0.1)
    line = _refused(_run(spec, shared / "camp.sqlite", tmp_path), str(planted))
    why = "symbolic link" if plant == "link" else f"owned by another user (uid {other_user.uid})"
    assert why in line
    assert sorted(p.name for p in shared.iterdir()) == ["camp.sqlite.blocks", "theirs"]
    assert list(theirs.iterdir()) == [] and (plant == "link" or list(planted.iterdir()) == [])


def test_a_nodes_campaigns_folder_another_user_made_is_refused(
    other_user, reachable_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a Ray node a block's folder is in the user cache's campaigns/: in a shared cache
    root, one another user made there is refused and nothing is written into it."""
    shared = _shared_dir(reachable_tmp)
    planted = shared / "campaigns"
    other_user.sh(f"mkdir -m 777 {planted}")
    monkeypatch.setenv("COMPILE_AHEAD_CACHE_DIR", str(shared))
    task = BlockTask("c1", 0, "cell00-tiny", 0, "schedule", ("ab", "schedule"), (), (), 0, None,
                     "tiny", None, model_identity("tiny"))  # fmt: skip
    result = run_block(task, "node")
    assert result["status"] == "failed", result
    assert f"{planted} is owned by another user (uid {other_user.uid})" in result["error"]
    assert list(planted.iterdir()) == []


# -- the trial's code ---------------------------------------------------------------------------
def test_a_trial_runs_no_code_its_manifest_names(tmp_path: Path) -> None:
    """A manifest that names modules to load (as an older one did) has them ignored: the
    trial loads compile_ahead's own, found beside its file."""
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    exported = export_rungs("tiny", (16,), "f32", tmp_path / "ir")
    manifest = exported.manifest("CPU", {}, pass_profile=True)
    for key in ("passprofile", "decompression", "fold_guard", "perfcounters"):
        manifest[key] = str(evil)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    out = tmp_path / "out.json"
    env = {k: v for k, v in os.environ.items() if k != "OV_ENABLE_PROFILE_PASS"}
    done = subprocess.run([sys.executable, "-s", str(WORKER), str(path), str(out)], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)  # fmt: skip
    assert not marker.exists()
    assert done.returncode == 0, done.stderr
    (rung,) = json.loads(out.read_text())["rungs"]
    assert rung["decompression_marked"] > 0 and rung["lookups_marked"] == 1
    assert rung["passes"]["pass_records"] > 0


@pytest.mark.slow
def test_ab_compile_manifests_name_no_code(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    argv = ["ab", "compile", "--arm", "A=current", "--arm", "B=current,NUM_STREAMS=1",
            "--model", "tiny", "--ladder", "16", "--pairs", "1", "--warmup", "0", "--no-plot",
            "--quiet", "--out", str(out)]  # fmt: skip
    done = run([sys.executable, "-m", "compile_ahead.commands", *argv], tmp_path, TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    manifests = sorted(out.glob("manifest-*.json"))
    assert len(manifests) == 2
    for path in manifests:
        manifest = json.loads(path.read_text())
        rungs = manifest.pop("rungs")
        assert all(Path(r["xml"]).suffix == ".xml" for r in rungs)
        named = [v for v in manifest.values() if isinstance(v, str) and "/" in v]
        assert named == [], f"{path.name} names files: {named}"


# -- no lock file, nothing written through a link -----------------------------------------------
def _precious(path: Path) -> Path:
    path.write_text("precious\n")
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("store_kind", ["folder", "fifo", "device", "not-a-store", "absent"])
def test_a_lock_name_linked_to_a_file_never_changes_it(tmp_path: Path, store_kind: str) -> None:
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=0.1)
    precious = _precious(tmp_path / "precious.txt")
    store = tmp_path / "d2"
    lock = tmp_path / "d2.lock"
    lock.symlink_to(precious)
    if store_kind == "folder":
        store.mkdir()
    elif store_kind == "fifo":
        os.mkfifo(store)
    elif store_kind == "device":
        os.mknod(store, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # as /dev/null
    elif store_kind == "not-a-store":
        store.write_text("notes\n")
    proc = _run(spec, store, tmp_path)
    if store_kind == "absent":  # a new store: it runs, and leaves the link alone
        assert proc.returncode == 0, proc.stderr
    else:
        _refused(proc, str(store), "campaign store")
        assert not (tmp_path / "d2.blocks").exists()
    assert precious.read_text() == "precious\n"
    assert lock.is_symlink() and os.readlink(lock) == str(precious)


@pytest.mark.parametrize("store_kind", ["folder", "fifo", "device"])
def test_a_refused_store_leaves_nothing_beside_it(tmp_path: Path, store_kind: str) -> None:
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=0.1)
    work = tmp_path / "work"
    work.mkdir()
    store = work / "x"
    if store_kind == "folder":
        store.mkdir()
    elif store_kind == "fifo":
        os.mkfifo(store)
    else:
        os.mknod(store, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    _refused(_run(spec, store, tmp_path), str(store), "no campaign store")
    assert [p.name for p in work.iterdir()] == ["x"]


def test_status_reads_no_lock_name(tmp_path: Path) -> None:
    """A FIFO linked where a lock file used to be is never opened (it would block)."""
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=0.1)
    store = tmp_path / "s.sqlite"
    assert _run(spec, store, tmp_path).returncode == 0
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "s.sqlite.lock").unlink(missing_ok=True)  # an earlier version's lock file
    (tmp_path / "s.sqlite.lock").symlink_to(tmp_path / "fifo")
    status = run(campaign_command("status", str(store)), tmp_path, timeout=60)
    assert status.returncode == 0 and "coordinator: none running" in status.stdout


@pytest.mark.parametrize("where", ["shared", "theirs"])
def test_another_users_lock_link_changes_nothing(
    tmp_path: Path, other_user, reachable_tmp: Path, where: str
) -> None:
    """Another user links camp.sqlite.lock to a private file of ours before we run, in a
    sticky shared directory (the campaign runs) or in their own directory (the store's
    directory is theirs: refused in one line); the file is as it was either way."""
    shared = _shared_dir(reachable_tmp)
    directory = shared
    if where == "theirs":
        directory = shared / "theirs"
        other_user.sh(f"mkdir -m 755 {directory}")
    precious = _precious(tmp_path / "precious.txt")
    other_user.sh(f"ln -s {precious} {directory / 'camp.sqlite.lock'}")
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=0.1)
    proc = _run(spec, directory / "camp.sqlite", tmp_path)
    if where == "shared":
        assert proc.returncode == 0, proc.stderr
    else:
        _refused(proc, str(directory), f"owned by another user (uid {other_user.uid})")
        assert [p.name for p in directory.iterdir()] == ["camp.sqlite.lock"]
    assert precious.read_text() == "precious\n"
    assert stat.S_IMODE(precious.stat().st_mode) == 0o600


# -- one coordinator per store file -------------------------------------------------------------
def _count(store: Path, status: str) -> int:
    with connect(store) as conn:
        return conn.execute("SELECT COUNT(*) FROM blocks WHERE status = ?", (status,)).fetchone()[0]


@pytest.mark.slow
def test_one_coordinator_per_store_file_whatever_its_name(tmp_path: Path) -> None:
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=1.0)
    store = tmp_path / "two.sqlite"
    first = subprocess.Popen(
        campaign_command("run", str(spec), "--store", str(store), "--quiet"),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not (store.exists() and _count(store, "submitted") == 1):
            assert first.poll() is None and time.monotonic() < deadline, "no block started"
            time.sleep(0.2)
        os.link(store, tmp_path / "hl.sqlite")
        (tmp_path / "alias").symlink_to(tmp_path, target_is_directory=True)
        for name in ("hl.sqlite", "./two.sqlite", str(tmp_path / "alias" / "two.sqlite")):
            again = _run(spec, Path(name), tmp_path)
            _refused(again, "another coordinator runs this campaign")
        status = run(campaign_command("status", "hl.sqlite"), tmp_path)
        assert status.returncode == 0 and "coordinator: none running" not in status.stdout
        _, err = first.communicate(timeout=TIMEOUT_S)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert _count(store, "done") == 4 and integrity(store) == "ok"
    # no coordinator now: the second name is still refused (SQLite's log is kept per name)
    _refused(_run(spec, tmp_path / "hl.sqlite", tmp_path), "2 names (hard links)")
    assert _count(store, "done") == 4


# -- a store is used by its own name, never through a link ----------------------------------
@pytest.fixture(scope="module")
def made_store(sleep_campaign_store) -> Path:
    """A campaign store of sleeping trials, run by the public command (conftest.py's)."""
    return sleep_campaign_store


def _entries(directory: Path) -> dict[str, tuple[int, float]]:
    """Every name under ``directory`` (links not followed) with its size and mtime."""
    return {
        str(p.relative_to(directory)): (p.lstat().st_size, p.lstat().st_mtime)
        for p in sorted(directory.rglob("*"))
    }


def _store_commands(spec: Path, link: Path) -> dict[str, list[str]]:
    out = link.parent / "report"
    return {
        "run": campaign_command("run", str(spec), "--store", str(link), "--quiet"),
        "status": campaign_command("status", str(link)),
        "report": campaign_command("report", str(link), "--out", str(out), "--no-plot"),
        "compare": cli_command("compare", str(link)),
    }


@pytest.mark.parametrize("command", ["run", "status", "report", "compare"])
@pytest.mark.parametrize("target", ["store", "dangling"])
def test_a_symlinked_store_is_refused_by_every_command(made_store, tmp_path, command, target):
    """`--store link.sqlite` (and a store argument) naming a link, to a store or to nothing,
    is refused in one line: no STORE.blocks beside the link, nothing written to the target."""
    work, real = tmp_path / "work", tmp_path / "real"
    work.mkdir()
    real.mkdir()
    shutil.copyfile(made_store, real / "c.sqlite")
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=0.0)
    link = work / "link.sqlite"
    link.symlink_to(real / ("c.sqlite" if target == "store" else "absent.sqlite"))
    before = (_entries(work), _entries(real))
    line = _refused(run(_store_commands(spec, link)[command], tmp_path), str(link))
    # compare reads whatever DIR is: a link to nothing is no file to it
    nothing = command == "compare" and target == "dangling"
    assert ("no such file" if nothing else "symbolic link") in line, line
    assert (_entries(work), _entries(real)) == before
    if target == "store":
        assert integrity(real / "c.sqlite") == "ok"


def test_a_store_in_a_linked_directory_is_the_store_itself(made_store, tmp_path):
    """A link among the directories above the store is followed as in any path: the store,
    its journal and its blocks' folder are the ones in the directory it leads to."""
    real = tmp_path / "real"
    real.mkdir()
    shutil.copyfile(made_store, real / "c.sqlite")
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=0.0)
    done = _run(spec, tmp_path / "alias" / "c.sqlite", tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in real.iterdir()) == ["c.sqlite", "c.sqlite.blocks"]
    status = run(campaign_command("status", "alias/c.sqlite"), tmp_path)
    assert status.returncode == 0 and "4 done of 4" in status.stdout, status.stderr


def test_another_users_link_to_our_store_in_a_shared_directory_is_refused(
    made_store, tmp_path: Path, other_user, reachable_tmp: Path
) -> None:
    """Another user links camp.sqlite in a sticky shared directory to a store of ours: a run
    by that name is refused, makes no blocks' folder there and leaves our store as it was."""
    shared = _shared_dir(reachable_tmp)
    ours = tmp_path / "ours.sqlite"
    shutil.copyfile(made_store, ours)
    other_user.sh(f"ln -s {ours} {shared / 'camp.sqlite'}")
    spec = sleep_spec(tmp_path / "sleep.toml", seconds=0.0)
    before = _entries(tmp_path)
    _refused(_run(spec, shared / "camp.sqlite", tmp_path), "symbolic link")
    assert [p.name for p in shared.iterdir()] == ["camp.sqlite"]
    assert _entries(tmp_path) == before
