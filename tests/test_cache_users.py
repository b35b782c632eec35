"""The compile cache and other users (issue 29, items 6 and 7): in a shared cache root another
user can neither swap in another model's entry, nor redirect the cache's writes or deletions
through a planted symbolic link, nor have the cache use a directory or entry it owns; a root
that others can change is not used (one warning line, the compile runs uncached); entries and
directories are private whatever the umask. This process (root, as in CI) is the victim; the
other user is a temporary account acting through /bin/sh. Each through `compile-ahead generate`,
against the same command with --no-cache."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
from pathlib import Path

import pytest
from cache_checks import assert_one_line_warning, other_weights, warning_lines

from compile_ahead.commands.main import main
from compile_ahead.runtime.compile.cache import entry_format
from compile_ahead.runtime.compile.cache.dirs import user_dir_name
from compile_ahead.runtime.sources.base import ModelSource
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import wait_until_settled

PREFIXES = [f"{i:02x}" for i in range(256)]  # every name an entry's directory can have


def generate(model: Path | str, cache: list[str], capsys) -> tuple[dict, str]:
    """`generate --json` of five prompt tokens: its report and its stderr."""
    argv = ["generate", "--model", str(model), "--prompt-ids", "1,2,3,4,5", "--json"]
    argv += ["--max-new-tokens", "12", "--inference-precision", "f32", *cache]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def states(report: dict) -> set[str]:
    return {graph["cache"] for graph in report["compile_cache"].values()}


def files_under(directory: Path) -> list[Path]:
    """Every file below ``directory``, never through a symbolic link."""
    return [Path(d, f) for d, _, names in os.walk(directory) for f in names]


@pytest.fixture(scope="module")
def models(tiny_qwen2_dir, tmp_path_factory) -> tuple[Path, Path]:
    """The victim's model A and a model B of the same shapes that gives other tokens."""
    a = Path(shutil.copytree(tiny_qwen2_dir, tmp_path_factory.mktemp("models") / "a"))
    b = Path(shutil.copytree(a, a.parent / "b"))
    (weights,) = b.glob("*.safetensors")
    weights.write_bytes(other_weights(weights))
    wait_until_settled(a)
    wait_until_settled(b)
    return a, b


def forge(models: tuple[Path, Path], out: Path, monkeypatch, capsys) -> dict[str, Path]:
    """Model B's entries as the cache itself writes them (a valid trailer and checksum) but
    under the names of model A's: B stored while its weights claim A's identity. By name."""
    a, b = models
    a_weights = resolve_model(str(a)).weights_identity()
    with monkeypatch.context() as patched:
        patched.setattr(ModelSource, "weights_identity", lambda self: a_weights)
        generate(b, ["--cache-dir", str(out)], capsys)
    forged = {p.name: p for p in out.rglob("*" + entry_format.SUFFIX)}
    assert forged
    return forged


def make_shared_root(parent: Path) -> Path:
    root = parent / "shared-cache"
    root.mkdir()
    root.chmod(0o1777)  # like /tmp: anyone may create, only owners may rename or delete
    return root


def test_another_users_swapped_entry_is_never_imported(
    models, other_user, reachable_tmp, monkeypatch, capsys
):
    """The issue's case: the other user pre-creates every entry directory 0777, the victim
    stores, the other user swaps in model B's entry under A's name."""
    a, b = models
    root = make_shared_root(reachable_tmp)
    other_user.sh(f"cd {shlex.quote(str(root))} && mkdir -m 0777 {' '.join(PREFIXES)}")
    control, _ = generate(a, ["--no-cache"], capsys)
    other, _ = generate(b, ["--no-cache"], capsys)
    assert control["sequences"][0]["tokens"] != other["sequences"][0]["tokens"]
    cache = ["--cache-dir", str(root)]
    first, _ = generate(a, cache, capsys)
    assert states(first) == {"miss"}
    victims = sorted(p for p in root.rglob("*" + entry_format.SUFFIX) if not p.name.startswith("."))
    assert victims

    forged_dir = reachable_tmp / "forged"
    forged = forge(models, forged_dir, monkeypatch, capsys)
    assert set(forged) == {p.name for p in victims}
    for path in [forged_dir, *forged_dir.rglob("*")]:  # readable by the other user
        path.chmod(0o755 if path.is_dir() else 0o644)
    for entry in victims:
        tmp, src, dst = (
            shlex.quote(str(p)) for p in (entry.parent / ".swap", forged[entry.name], entry)
        )
        other_user.sh(f"cp {src} {tmp} && mv -f {tmp} {dst}", check=False)

    again, err = generate(a, cache, capsys)
    assert again["sequences"][0]["tokens"] == control["sequences"][0]["tokens"]
    assert states(again) == {"hit"}  # the victim's own entry, untouched
    assert warning_lines(err) == []
    for path in victims:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize("planted", ["symlink", "directory"])
def test_names_another_user_planted_in_a_shared_root_are_never_used(
    planted, models, other_user, reachable_tmp, capsys
):
    """Every directory name the cache could use in the root, planted by the other user as a
    symbolic link to a directory of the victim's (which holds a file named like an entry, over
    the cap) or as a 0777 directory: nothing is written or deleted through them."""
    a, _ = models
    root = make_shared_root(reachable_tmp)
    third = reachable_tmp / "third"
    third.mkdir(mode=0o700)
    precious = third / f"ab{'0' * 62}{entry_format.SUFFIX}"
    precious.write_bytes(b"\0" * 2_000_000)
    make = f"ln -s {shlex.quote(str(third))}" if planted == "symlink" else "mkdir -m 0777"
    names = " ".join([*PREFIXES, user_dir_name()])
    other_user.sh(f"cd {shlex.quote(str(root))} && for p in {names}; do {make} $p; done")

    control, _ = generate(a, ["--no-cache"], capsys)
    cache = ["--cache-dir", str(root), "--cache-max-gb", "0.001"]  # entries fit, `precious` not
    report, err = generate(a, cache, capsys)
    assert report["sequences"][0]["tokens"] == control["sequences"][0]["tokens"]
    assert states(report) == {"off"}
    why = (
        "is a symbolic link"
        if planted == "symlink"
        else f"owned by another user (uid {other_user.uid})"
    )
    assert_one_line_warning(err, str(root / user_dir_name()), why)
    assert files_under(third) == [precious]
    assert files_under(root) == []


@pytest.mark.parametrize(
    "case",
    ["no sticky bit", "owned by another user", "sticky, another user's", "another user's link"],
)
def test_a_cache_root_another_user_can_change_is_not_used(
    case, models, reachable_tmp, request, capsys
):
    """Root running on a user's cache, a cache root of another user's (sticky or not) or one
    anyone may change, or a link to the cache that another user owns: one warning line, the
    compile uncached, nothing written."""
    a, _ = models
    root = reachable_tmp / "cache"
    mine = reachable_tmp / "mine"  # a directory of the victim's, where a link may point
    mine.mkdir(mode=0o700)
    if case == "no sticky bit":
        root.mkdir()
        root.chmod(0o777)
        why = "can be written by other users and has no sticky bit"
    elif case == "another user's link":
        user = request.getfixturevalue("other_user")
        root.mkdir()
        root.chmod(0o1777)
        root = root / "link"
        user.sh(f"ln -s {shlex.quote(str(mine))} {shlex.quote(str(root))}")
        why = f"is a symbolic link owned by another user (uid {user.uid})"
    else:
        user = request.getfixturevalue("other_user")
        root.mkdir()
        root.chmod(0o1777 if case.startswith("sticky") else 0o755)
        os.chown(root, user.uid, user.gid)
        why = f"is owned by another user (uid {user.uid})"

    control, _ = generate(a, ["--no-cache"], capsys)
    report, err = generate(a, ["--cache-dir", str(root)], capsys)
    assert report["sequences"][0]["tokens"] == control["sequences"][0]["tokens"]
    assert states(report) == {"off"}
    assert_one_line_warning(err, str(root), why, "compiling without the cache")
    assert files_under(reachable_tmp) == []


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_entries_and_directories_are_private_whatever_the_umask(umask, tmp_path, capsys):
    """Directories the cache creates (missing parents of --cache-dir included) are 0700 and its
    entries 0600: a private model's compiled weights are never readable by others."""
    root = tmp_path / "new" / "cache"
    previous = os.umask(umask)
    try:
        report, _ = generate("tiny", ["--cache-dir", str(root)], capsys)
    finally:
        os.umask(previous)
    assert states(report) == {"miss"}
    entries = files_under(tmp_path / "new")
    assert [p.suffix for p in entries] == [entry_format.SUFFIX]
    assert {stat.S_IMODE(p.stat().st_mode) for p in entries} == {0o600}
    directories = [Path(d) for d, _, _ in os.walk(tmp_path / "new")]
    assert len(directories) == 3  # new/, cache/ and the entry's
    assert {stat.S_IMODE(d.stat().st_mode) for d in directories} == {0o700}


@pytest.mark.parametrize("change", ["owner", "mode"])
def test_an_entry_that_is_not_this_users_own_is_not_imported(
    change, models, tmp_path, request, monkeypatch, capsys
):
    """Another model's entry under this model's name that another user owns, or that others
    can write: refused with one line, deleted and recompiled; the new entry is imported."""
    a, _ = models
    root = tmp_path / "cache"
    cache = ["--cache-dir", str(root)]
    control, _ = generate(a, ["--no-cache"], capsys)
    generate(a, cache, capsys)
    forged = forge(models, tmp_path / "forged", monkeypatch, capsys)
    (entry,) = (p for p in root.rglob("*" + entry_format.SUFFIX))
    shutil.copyfile(forged[entry.name], entry)
    if change == "owner":
        user = request.getfixturevalue("other_user")
        os.chown(entry, user.uid, user.gid)
        why = f"owned by another user (uid {user.uid})"
    else:
        entry.chmod(0o666)
        why = "can be written by other users"

    again, err = generate(a, cache, capsys)
    assert again["sequences"][0]["tokens"] == control["sequences"][0]["tokens"]
    assert states(again) == {"miss"}
    assert_one_line_warning(err, str(entry), "unusable", why)
    third, _ = generate(a, cache, capsys)
    assert (
        states(third) == {"hit"}
        and third["sequences"][0]["tokens"] == control["sequences"][0]["tokens"]
    )


def test_an_earlier_caches_wider_modes_are_narrowed(models, tmp_path, monkeypatch, capsys):
    """The default cache as an earlier version left it (directories 0775 under a umask of 002,
    entries 0644): still used, without a warning, and made private on the way."""
    a, _ = models
    monkeypatch.setenv("COMPILE_AHEAD_CACHE_DIR", str(tmp_path / "user-cache"))
    control, _ = generate(a, ["--no-cache"], capsys)
    generate(a, [], capsys)
    root = tmp_path / "user-cache" / "compiled"
    (entry,) = files_under(root)
    for path, mode in ((root, 0o775), (entry.parent, 0o775), (entry, 0o644)):
        path.chmod(mode)
    again, err = generate(a, [], capsys)
    assert (
        states(again) == {"hit"}
        and again["sequences"][0]["tokens"] == control["sequences"][0]["tokens"]
    )
    assert warning_lines(err) == []
    modes = [stat.S_IMODE(p.stat().st_mode) for p in (root, entry.parent, entry)]
    assert modes == [0o700, 0o700, 0o600]
