"""A second local user, for tests of what another user can do to this user's files (a shared
compile cache, `trace open` on a file in another user's directory).

The tests run as root (as in CI): the user is made with useradd for one test and removed after
it, and its actions run as /bin/sh commands in a child process with its uid and gid (root's
interpreter under /root is not reachable by another user, the shell and coreutils are). A test
that cannot have one (not root, no useradd) is skipped with the reason. Its files live in a
directory under /tmp that it can reach (pytest's own temporary directories are private)."""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

_SBIN = "/usr/sbin:/sbin"


@dataclass(frozen=True)
class OtherUser:
    name: str
    uid: int
    gid: int

    def sh(self, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``script`` run by /bin/sh as this user (no supplementary groups)."""
        done = subprocess.run(
            ["/bin/sh", "-c", script],
            user=self.uid,
            group=self.gid,
            extra_groups=[],
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert done.returncode == 0, f"as {self.name}: {script}\n{done.stderr}"
        return done


def _account_tool(tool: str, *args: str) -> None:
    """useradd/userdel, retried while another process holds the account files' lock."""
    path = shutil.which(tool, path=f"{os.environ.get('PATH', '')}:{_SBIN}")
    if path is None:
        pytest.skip(f"{tool} is not installed: no second user can be created for this test")
    for _ in range(50):
        done = subprocess.run([path, *args], capture_output=True, text=True)
        if done.returncode == 0:
            return
        if "lock" not in done.stderr:
            break
        time.sleep(0.1 + secrets.randbelow(200) / 1000)
    message = f"{tool} {' '.join(args)} failed: {done.stderr.strip()}"
    if tool == "useradd":
        pytest.skip(message)
    raise AssertionError(message)


@contextlib.contextmanager
def other_user() -> Iterator[OtherUser]:
    if os.geteuid() != 0:
        pytest.skip(f"creating a second user needs root; this test runs as uid {os.geteuid()}")
    name = f"cat{os.getpid()}{secrets.token_hex(3)}"
    _account_tool("useradd", "--no-create-home", "--user-group", "--shell", "/bin/false", name)
    try:
        entry = pwd.getpwnam(name)
        yield OtherUser(name, entry.pw_uid, entry.pw_gid)
    finally:
        _account_tool("userdel", name)


@contextlib.contextmanager
def reachable_dir() -> Iterator[Path]:
    """A fresh root-owned directory under /tmp (0755) that another user can traverse."""
    path = Path(tempfile.mkdtemp(prefix="compile-ahead-test-", dir="/tmp"))
    try:
        path.chmod(0o755)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
