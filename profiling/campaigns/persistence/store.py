"""One SQLite file per campaign (WAL): the spec, its cells, every block and trial, machines.

A block row is written when the block is handed to an executor ('submitted') and completed in
one transaction with all its trials when the block ends ('done', 'failed' or 'refused'), so a
killed coordinator, a lost node or a full disk loses at most the blocks in flight: their rows
stay 'submitted' and the next run marks them 'interrupted' and runs the block again, whole. A
unique index allows one 'done' row per (cell, block), so no block's trials are recorded twice.

The store is created under a temporary name, locked, and linked into place, so it exists
complete or not at all, and two coordinators creating it at once find one store, locked by one
of them. One coordinator at a time holds the store file's flock (store_lock.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import socket
import sqlite3
import time
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.format_version import FORMAT_KEY, FORMAT_VERSION
from compile_ahead.output.inputs import is_sqlite_file, sqlite_side_files
from compile_ahead.profiling.campaigns.definition.spec import CampaignSpec
from compile_ahead.profiling.campaigns.definition.validation.identity import (
    identity_change,
    refusal,
)
from compile_ahead.profiling.campaigns.persistence.store_lock import CoordinatorLock, own_name
from compile_ahead.profiling.results_format.campaign import CampaignMeta, read_meta

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE cells (
  idx INTEGER PRIMARY KEY, label TEXT NOT NULL, dirname TEXT NOT NULL, axes TEXT NOT NULL,
  argv TEXT NOT NULL, model TEXT NOT NULL, model_identity TEXT NOT NULL);
CREATE TABLE fingerprints (digest TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE blocks (
  id INTEGER PRIMARY KEY,
  cell INTEGER NOT NULL REFERENCES cells(idx),
  block INTEGER NOT NULL,
  status TEXT NOT NULL
    CHECK (status IN ('submitted', 'done', 'failed', 'refused', 'interrupted')),
  submitted REAL NOT NULL, started REAL, ended REAL,
  node TEXT, host TEXT, fingerprint TEXT REFERENCES fingerprints(digest),
  workdir TEXT, command TEXT, exit INTEGER, error TEXT, experiment TEXT,
  coordinator TEXT NOT NULL);
CREATE UNIQUE INDEX blocks_done_once ON blocks(cell, block) WHERE status = 'done';
CREATE TABLE trials (
  id INTEGER PRIMARY KEY,
  block_id INTEGER NOT NULL REFERENCES blocks(id),
  idx INTEGER NOT NULL, arm TEXT NOT NULL, position INTEGER NOT NULL, warmup INTEGER NOT NULL,
  command TEXT NOT NULL, env TEXT NOT NULL, started REAL NOT NULL, wall REAL NOT NULL,
  exit INTEGER, error TEXT, result TEXT, artifacts TEXT NOT NULL, record TEXT NOT NULL,
  UNIQUE (block_id, idx));
"""
ENDED = ("done", "failed", "refused")


def store_files(store: Path) -> list[Path]:
    """The store and the files SQLite keeps beside it (its write-ahead log, shared memory and
    rollback journal): what a command reading the store reads."""
    return [store, *sqlite_side_files(store)]


_NEW_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _link_into_place(tmp: Path, path: Path) -> None:
    """``tmp`` given the name ``path``, never replacing a file there (FileExistsError)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as err:  # a file system without hard links: a rename (may replace)
        if err.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP):
            raise
        if os.path.lexists(path):
            raise FileExistsError(path) from None
        os.rename(tmp, path)


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30.0)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def _check_unchanged(path: Path, named: os.stat_result) -> None:
    """The file SQLite opened at ``path`` is still the one checked before it (its own name,
    not made a link meanwhile); else one line."""
    now = own_name(path)
    if (now.st_dev, now.st_ino) != (named.st_dev, named.st_ino):
        raise CompileAheadError(f"{path}: was replaced while it was opened; run again")


def _store_error(path: Path, err: sqlite3.Error) -> CompileAheadError:
    return CompileAheadError(f"{path}: the campaign store cannot be written ({err})")


class Store:
    def __init__(self, path: Path, conn: sqlite3.Connection, campaign: CampaignMeta):
        self.path = path
        self.conn = conn
        self.campaign = campaign  # its meta, typed, as the store was opened

    # -- creating and opening -------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: Path,
        spec: CampaignSpec,
        identities: dict[int, dict],
        lock: CoordinatorLock | None = None,
    ) -> Store:
        """A new store for ``spec`` (cells with their models' identities), complete or absent,
        locked by ``lock`` before it has its name (None: locked only while it is made). Made
        meanwhile by another coordinator: that one's store is locked and opened instead
        (refused while that coordinator runs)."""
        if lock is None:
            lock = CoordinatorLock(path)
            try:
                store = cls.create(path, spec, identities, lock)
            finally:
                lock.release()
            return store
        tmp = path.with_name(f".{path.name}.creating-{secrets.token_hex(4)}")
        try:  # a new file of ours (never a name another user put there), locked from the start
            lock.hold(os.open(tmp, _NEW_FLAGS, 0o644), path)  # SQLite's own mode
        except OSError as err:
            raise CompileAheadError(f"{path}: cannot create the campaign store ({err})") from None
        try:
            cls._fill(tmp, spec, identities)
            _link_into_place(tmp, path)
        except FileExistsError:
            lock.release()
            lock.acquire()
            return cls.open(path)
        except (sqlite3.Error, OSError) as err:
            lock.release()
            raise CompileAheadError(f"{path}: cannot create the campaign store ({err})") from None
        finally:
            tmp.unlink(missing_ok=True)
        return cls.open(path)

    @staticmethod
    def _fill(tmp: Path, spec: CampaignSpec, identities: dict[int, dict]) -> None:
        """The schema, the campaign's meta and its cells, written into the new file ``tmp``."""
        conn = _connect(tmp)
        try:
            with conn:
                conn.executescript(SCHEMA)
                conn.executemany("INSERT INTO meta VALUES (?, ?)", _meta(spec).items())
                conn.executemany(
                    "INSERT INTO cells VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            c.index,
                            c.label,
                            c.dirname,
                            json.dumps(c.axes),
                            json.dumps(c.argv),
                            c.model,
                            json.dumps(identities[c.index]),
                        )
                        for c in spec.cells
                    ],
                )
        finally:
            conn.close()

    @classmethod
    def open(cls, path: Path) -> Store:
        """The store at ``path``, by its own name (a symbolic link is refused); any other
        file is refused untouched (it is checked to be a store before the store's settings,
        WAL, are applied)."""
        named = own_name(path)
        if not is_sqlite_file(path):
            raise CompileAheadError(f"{path}: not a campaign store (not an SQLite database)")
        conn = None
        try:
            conn = _connect(path)
            _check_unchanged(path, named)
            schema = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if schema is not None and schema[0] == str(SCHEMA_VERSION):
                campaign = read_meta(conn, path)  # a newer results format: refused here
                conn.execute("PRAGMA journal_mode = WAL")
                return cls(path, conn, campaign)
            problem = f"of schema {SCHEMA_VERSION}"
        except sqlite3.Error as err:
            problem = f"({err})"
        except CompileAheadError:
            if conn is not None:
                conn.close()
            raise
        if conn is not None:
            conn.close()
        raise CompileAheadError(f"{path}: not a campaign store {problem}")

    def close(self) -> None:
        self.conn.close()

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, values: dict[str, str]) -> None:
        try:
            with self.conn:
                self.conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", values.items())
        except sqlite3.Error as err:
            raise _store_error(self.path, err) from None

    def check_spec(self, spec: CampaignSpec, identities: dict[int, dict]) -> None:
        """A run on an existing store must be the campaign it holds (its identity: what
        defines its arms too, identity.py), on the same models."""
        stored = self.campaign.identity  # none in a store made before
        change = identity_change(stored, spec.identity) if stored else None
        if change is not None:
            raise refusal(self.path, change)
        held = self.campaign
        if held.spec_digest != spec.digest:
            raise CompileAheadError(
                f"{self.path}: holds another campaign ({held.name}, from "
                f"{held.spec_path}); its spec differs from {spec.path}: use a new store"
            )
        for row in self.conn.execute("SELECT idx, model, model_identity FROM cells"):
            if json.loads(row["model_identity"]) != identities[row["idx"]]:
                raise CompileAheadError(
                    f"{self.path}: model {row['model']} is not the one this campaign's blocks "
                    "ran on (its files or synthetic weights changed); use a new store"
                )

    # -- blocks ---------------------------------------------------------------------------
    def mark_interrupted(self) -> int:
        """Blocks left in flight by a coordinator that ended without recording them."""
        try:
            with self.conn:
                cur = self.conn.execute(
                    "UPDATE blocks SET status = 'interrupted' WHERE status = 'submitted'"
                )
        except sqlite3.Error as err:
            raise _store_error(self.path, err) from None
        return cur.rowcount

    def done(self) -> set[tuple[int, int]]:
        rows = self.conn.execute("SELECT cell, block FROM blocks WHERE status = 'done'")
        return {(r[0], r[1]) for r in rows}

    def failed_blocks(self) -> list[sqlite3.Row]:
        """Failed or refused attempts of blocks not done since: cell, label, block, host,
        status, error, in the order they were submitted."""
        return self.conn.execute(
            "SELECT b.cell, c.label, b.block, b.host, b.status, b.error FROM blocks b JOIN cells c "
            "ON c.idx = b.cell WHERE b.status IN ('failed', 'refused') AND NOT EXISTS (SELECT 1 "
            "FROM blocks d WHERE d.cell = b.cell AND d.block = b.block AND d.status = 'done') "
            "ORDER BY b.id"
        ).fetchall()

    def fingerprints(self) -> dict[str, dict]:
        """Machine fingerprint digest -> its data, for every machine a block ran on."""
        rows = self.conn.execute("SELECT digest, data FROM fingerprints ORDER BY digest")
        return {r["digest"]: json.loads(r["data"]) for r in rows}

    def submit(self, cell: int, block: int) -> int:
        coordinator = f"pid {os.getpid()} on {socket.gethostname()}"
        try:
            with self.conn:
                cur = self.conn.execute(
                    "INSERT INTO blocks (cell, block, status, submitted, coordinator) "
                    "VALUES (?, ?, 'submitted', ?, ?)",
                    (cell, block, time.time(), coordinator),
                )
        except sqlite3.Error as err:
            raise _store_error(self.path, err) from None
        return int(cur.lastrowid or 0)

    def commit(self, row: int, result: dict) -> None:
        """The block's end and all its trials, in one transaction."""
        try:
            with self.conn:
                self._write_block(row, result)
        except sqlite3.IntegrityError as err:
            raise CompileAheadError(
                f"{self.path}: block row {row} cannot be recorded ({err}); nothing of it kept"
            ) from None
        except sqlite3.Error as err:
            raise _store_error(self.path, err) from None

    def _write_block(self, row: int, result: dict) -> None:
        fp = result.get("fingerprint")
        if fp is not None:
            self.conn.execute(
                "INSERT OR IGNORE INTO fingerprints VALUES (?, ?)",
                (fp["digest"], json.dumps(fp["data"], sort_keys=True)),
            )
        cur = self.conn.execute(
            "UPDATE blocks SET status = ?, started = ?, ended = ?, node = ?, host = ?, "
            "fingerprint = ?, workdir = ?, command = ?, exit = ?, error = ?, experiment = ? "
            "WHERE id = ? AND status = 'submitted'",
            (
                result["status"],
                result.get("started"),
                result.get("ended"),
                result.get("node"),
                result.get("host"),
                None if fp is None else fp["digest"],
                result.get("workdir"),
                _json(result.get("command")),
                result.get("exit"),
                result.get("error"),
                _json(result.get("experiment")),
                row,
            ),
        )
        if cur.rowcount != 1:
            raise sqlite3.IntegrityError(f"block row {row} is not in flight")
        for t in result.get("trials", []):
            record = {k: v for k, v in t.items() if k not in ("command", "env", "artifacts")}
            self.conn.execute(
                "INSERT INTO trials (block_id, idx, arm, position, warmup, command, env, "
                "started, wall, exit, error, result, artifacts, record) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row,
                    t["index"],
                    t["arm"],
                    t["position"],
                    int(t["warmup"]),
                    json.dumps(t["command"]),
                    json.dumps(t["env"]),
                    t["started_unix"],
                    t["wall_s"],
                    t["returncode"],
                    t["error"],
                    _json(t["result"]),
                    json.dumps(t["artifacts"]),
                    json.dumps(record | {"result": None}, allow_nan=False),
                ),
            )

    def interrupt(self, rows: list[int]) -> None:
        """In-flight rows of a coordinator being stopped (best effort: the next run marks any
        left over)."""
        with contextlib.suppress(sqlite3.Error), self.conn:
            self.conn.executemany(
                "UPDATE blocks SET status = 'interrupted' WHERE id = ? AND status = 'submitted'",
                [(r,) for r in rows],
            )


def _json(value: object) -> str | None:
    return None if value is None else json.dumps(value, allow_nan=False)


def _meta(spec: CampaignSpec) -> dict[str, str]:
    import uuid

    return {
        "schema": str(SCHEMA_VERSION),
        FORMAT_KEY: str(FORMAT_VERSION),
        "campaign_id": uuid.uuid4().hex,
        "name": spec.name,
        "kind": spec.kind,
        "pairs": str(spec.pairs),
        "warmup": str(spec.warmup),
        "spec_path": str(spec.path.resolve()),
        "spec_text": spec.text,
        "spec_digest": spec.digest,
        "identity": json.dumps(spec.identity, sort_keys=True),
        "report_endpoints": json.dumps(spec.report_endpoints and list(spec.report_endpoints)),
        "created": str(time.time()),
    }
