"""The user cache's write lock opens only a plain file of this user's, never through a link."""

from __future__ import annotations

import io
import os

import pytest

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.user_cache import cache_lock


def test_a_lock_is_made_private_and_taken(tmp_path):
    lock = tmp_path / "sub" / ".thing.lock"
    with cache_lock(lock, "thing", io.StringIO()):
        assert lock.is_file()
    assert lock.stat().st_mode & 0o077 == 0


def test_a_lock_name_linked_elsewhere_creates_and_locks_nothing(tmp_path):
    target = tmp_path / "victim-not-yet-there"
    lock = tmp_path / ".thing.lock"
    lock.symlink_to(target)
    with (
        pytest.raises(CompileAheadError, match="cannot open the lock"),
        cache_lock(lock, "thing", io.StringIO()),
    ):
        pass
    assert not target.exists()


def test_a_hard_linked_lock_is_refused(tmp_path):
    other = tmp_path / "precious"
    other.write_text("keep")
    lock = tmp_path / ".thing.lock"
    os.link(other, lock)
    with (
        pytest.raises(CompileAheadError, match="one name"),
        cache_lock(lock, "thing", io.StringIO()),
    ):
        pass
    assert other.read_text() == "keep"


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_another_users_lock_file_is_refused(tmp_path):
    lock = tmp_path / ".thing.lock"
    lock.write_text("")
    os.chown(lock, 65534, 65534)
    with (
        pytest.raises(CompileAheadError, match="this user's"),
        cache_lock(lock, "thing", io.StringIO()),
    ):
        pass
