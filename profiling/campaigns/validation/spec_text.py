"""Checks of a campaign file's text and of its `[options]` and `[report]` tables (spec.py runs
them before anything is written).

- Every key and string of the file is free of control, format and line-separator characters
  (shown_text.py): names and values reach the terminal, the store and the report's headings.
- An `[options]` key is the name of one `ab` flag as `ab` spells it (``prompt-len`` or
  ``prompt_len``), nothing else: no ``--``, no ``=VALUE``, no other characters. Each becomes
  ``--NAME=VALUE``, so `ab`'s parser (which takes no abbreviation) matches the name exactly and
  never reads a value as a flag.
- `[report]` takes ``endpoints`` only, each the key of an endpoint the campaign's cells measure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.shown_text import hidden_character, shown

REPORT_KEYS = ("endpoints",)
_FLAG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# Flags the campaign sets for each block itself, and flags that are axes or arms.
RESERVED = {"out", "pairs", "warmup", "first-block", "quiet", "no-plot", "ir-dir", "timeout"}
RESERVED |= {"arm", "arms", "model", "synthetic-dtype", "ladder", "ov-config", "batch", "help"}


def _strings(value: object, where: str) -> Iterator[tuple[str, str]]:
    """(where, text) for every key and string in a parsed TOML value."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            inner = f"{where}.{shown(key)}" if where else shown(key)
            yield inner, key
            yield from _strings(item, inner)
    elif isinstance(value, list):
        for n, item in enumerate(value):
            yield from _strings(item, f"{where}[{n}]")


def check_text(data: dict, path: Path) -> None:
    """Refuse a key or string holding a character that would not print as itself."""
    for where, text in _strings(data, ""):
        found = hidden_character(text)
        if found is not None:
            raise CompileAheadError(
                f"{path}: {where} holds a control or format character ({found}) in "
                f"{shown(text)!r}; names and values are shown on terminals and in reports"
            )


def option_flags(options: dict, path: Path) -> list[str]:
    """The `ab` flags of the `[options]` table, ``--NAME=VALUE`` (``--NAME`` for true)."""
    flags: list[str] = []
    seen: dict[str, str] = {}
    for key, value in options.items():
        if not _FLAG_NAME.fullmatch(key):
            raise CompileAheadError(
                f"{path}: options.{shown(key)!r} is not the name of an `ab` flag: write it as "
                'ab spells it, without "--" or "=VALUE" (e.g. prompt-len = 128)'
            )
        flag = key.replace("_", "-")
        if flag in RESERVED:
            raise CompileAheadError(
                f"{path}: options.{key} is set by the campaign (axes, arms, pairs, warmup, "
                "timeout) or per block; remove it"
            )
        if flag in seen:
            raise CompileAheadError(f"{path}: options.{seen[flag]} and options.{key} are one flag")
        seen[flag] = key
        for v in value if isinstance(value, list) else [value]:
            if v is True:
                flags.append(f"--{flag}")
            elif isinstance(v, str | int | float) and v is not False:
                flags.append(f"--{flag}={v}")
            elif v is not False:
                raise CompileAheadError(f"{path}: options.{key} must be a string, number or true")
    return flags


def report_table(report: dict, path: Path) -> tuple[str, ...] | None:
    """The `[report]` table's endpoint keys (None: the kind's own), checked for form."""
    unknown = sorted(set(report) - set(REPORT_KEYS))
    if unknown:
        raise CompileAheadError(
            f"{path}: unknown key report.{unknown[0]}; keys: {', '.join(REPORT_KEYS)}"
        )
    endpoints = report.get("endpoints")
    if endpoints is None:
        return None
    if not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints):
        raise CompileAheadError(f"{path}: report.endpoints must be a list of endpoint keys")
    if not endpoints:
        raise CompileAheadError(f"{path}: report.endpoints is empty: the table would have no row")
    return tuple(endpoints)


def check_endpoints(
    chosen: tuple[str, ...],
    kind: str,
    ladders: Iterable[str],
    options: dict,
    path: Path,
    batches: Iterable[object] = (),
) -> None:
    """Every chosen endpoint is one that some cell of the campaign measures (``batches``: the
    batch axis's values; a cell at batch > 1 measures the batch's endpoints too)."""
    known = measured_endpoints(kind, ladders, options, batches)
    for key in chosen:
        if key not in known:
            raise CompileAheadError(
                f"{path}: report.endpoints: {shown(key)!r} is not an endpoint of this {kind} "
                f"campaign's cells; they measure: {', '.join(known)}"
            )


def measured_endpoints(
    kind: str, ladders: Iterable[str], options: dict, batches: Iterable[object] = ()
) -> list[str]:
    """The keys of the endpoints that `ab KIND` analyses for cells of these ladders, options
    and batches, in the order its reports list them."""
    from compile_ahead.profiling.trials.compile_kind.experiment import compile_endpoints
    from compile_ahead.profiling.trials.schedule_kind.experiment import schedule_endpoints
    from compile_ahead.runtime.ladder.capacities import Ladder

    flags = {k.replace("_", "-"): v for k, v in options.items()}
    batch = max((b for b in batches if isinstance(b, int)), default=1)
    keys: dict[str, None] = {}
    for text in ladders:
        rungs = Ladder.parse(text).rungs
        if kind == "compile":
            pass_profile = flags.get("pass-profile") is True
            eps = compile_endpoints(rungs, pass_profile, flags.get("counters") is True)
        else:
            eps = schedule_endpoints(rungs, batch)
        keys |= dict.fromkeys(e.key for e in eps)
    return list(keys)
