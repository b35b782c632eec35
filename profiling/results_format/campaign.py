"""A campaign's results: its store (one SQLite file; the tables in store.py's SCHEMA) and a
`campaign report` directory's campaign.json. The store's meta table holds the campaign's
settings as text; ``read_meta`` gives them typed, ``trial_record`` a trials row as the record
`ab report` reads."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.format_version import FORMAT_KEY, check_version, version_of
from compile_ahead.profiling.results_format.records import TrialRecord, parse_record

SUMMARY_JSON = "campaign.json"  # `campaign report`'s summary, also what marks its directory


@dataclass(frozen=True)
class CampaignMeta:
    """The store's meta table, typed (a key missing from an older store: its default)."""

    schema: int
    format_version: int
    campaign_id: str
    name: str
    kind: str  # compile | schedule
    pairs: int
    warmup: int
    spec_path: str
    spec_text: str
    spec_digest: str
    identity: dict[str, Any]  # what defines each arm (empty in a store made before it)
    report_endpoints: list[str] | None  # the spec's [report] endpoints
    created: float  # Unix time
    parallelism: int  # the nodes of the latest run when the store was opened (1 before one)


def _text(rows: dict[str, str], key: str) -> str:
    return rows.get(key) or ""


def read_meta(conn: sqlite3.Connection, path: Path) -> CampaignMeta:
    """The campaign's meta, or one line naming the value that cannot be read."""
    rows = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    try:
        return CampaignMeta(
            schema=int(rows.get("schema") or 0),
            format_version=check_version(rows.get(FORMAT_KEY), path),
            campaign_id=_text(rows, "campaign_id"),
            name=_text(rows, "name"),
            kind=_text(rows, "kind"),
            pairs=int(rows.get("pairs") or 0),
            warmup=int(rows.get("warmup") or 0),
            spec_path=_text(rows, "spec_path"),
            spec_text=_text(rows, "spec_text"),
            spec_digest=_text(rows, "spec_digest"),
            identity=json.loads(rows.get("identity") or "{}"),
            report_endpoints=json.loads(rows.get("report_endpoints") or "null"),
            created=float(rows.get("created") or 0.0),
            parallelism=int(rows.get("parallelism") or 1),
        )
    except ValueError as err:  # json.JSONDecodeError is one
        raise CompileAheadError(f"{path}: the campaign's meta cannot be read ({err})") from None


def trial_record(record: str, result: str | None, index: int, block: int) -> TrialRecord:
    """A trials row (its ``record`` and ``result`` columns) as the trial log's record, numbered
    ``index`` in block ``block`` of its cell; ValueError or InvalidTrial as ``parse_record``."""
    fields = json.loads(record)
    if not isinstance(fields, dict):
        raise ValueError("not a JSON object")
    fields |= {"result": None if result is None else json.loads(result)}
    return parse_record(fields | {"index": index, "block": block})


def read_summary(directory: Path) -> dict:
    """campaign.json of a `campaign report` directory: an object naming its design and cells."""
    path = directory / SUMMARY_JSON
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CompileAheadError(f"{path}: cannot read ({err})") from None
    if not isinstance(data, dict):
        raise CompileAheadError(f"{path}: not a JSON object")
    version_of(data, path)
    if not isinstance(data.get("design"), dict):
        raise CompileAheadError(
            f"{path}: names no campaign design (an older `campaign report`?); run `campaign "
            "report` again, or give `compare` the campaign store"
        )
    return data
