"""Checks of a campaign file's text and of its `[options]` and `[report]` tables (spec.py runs
them before anything is written).

- Every key and string of the file is free of control, format and line-separator characters
  (shown_text.py): names and values reach the terminal, the store and the report's headings.
- An `[options]` key is the name of one flag of `ab KIND` exactly as `ab` spells it
  (``prompt-len``; not ``prompt_len``, nor a prefix such as ``prompt``), read from `ab`'s own
  parser (ab_flags.py), nothing else: no ``--``, no ``=VALUE``. Each becomes ``--NAME=VALUE``,
  so `ab`'s parser never reads a value as a flag. A TOML list becomes one flag per item for a
  flag that repeats (``shape``), one comma-joined value for a flag that takes a
  comma-separated list (``prompt-len = [16, 40]`` is ``--prompt-len=16,40``), and is refused
  for a flag that takes one value (argparse would keep the last item only).
- `[report]` takes ``endpoints`` only, each the key of an endpoint the campaign's cells measure.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.campaigns.definition.validation.ab_flags import AbFlag, Takes
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


def option_flags(options: dict, kind: str, known: dict[str, AbFlag], path: Path) -> list[str]:
    """The `ab KIND` flags of the `[options]` table (``known``: `ab KIND`'s long flags), each
    value given as its flag takes it (ab_flags.py); one line naming the key otherwise."""
    flags: list[str] = []
    seen: dict[str, str] = {}  # what a flag sets -> the key that set it
    for key, value in options.items():
        flag = _option_flag(key, kind, known, path)
        if flag.dest in seen:
            raise CompileAheadError(
                f"{path}: options.{seen[flag.dest]} and options.{key} are one flag"
            )
        seen[flag.dest] = key
        flags += _flag_argv(flag, key, value, path)
    return flags


def _option_flag(key: str, kind: str, known: dict[str, AbFlag], path: Path) -> AbFlag:
    """The flag an `[options]` key names: exactly one of `ab KIND`'s, and not the campaign's."""
    if not _FLAG_NAME.fullmatch(key):
        raise CompileAheadError(
            f"{path}: options.{shown(key)!r} is not the name of an `ab` flag: write it as "
            'ab spells it, without "--" or "=VALUE" (e.g. prompt-len = 128)'
        )
    if key.lower().replace("_", "-") in RESERVED:  # however spelled: the campaign sets it
        raise CompileAheadError(
            f"{path}: options.{key} is set by the campaign (axes, arms, pairs, warmup, "
            "timeout) or per block; remove it"
        )
    if key not in known:
        raise CompileAheadError(
            f"{path}: options.{key} is not a flag of `ab {kind}`: {_hint(key, known)}"
        )
    return known[key]


def _hint(key: str, known: dict[str, AbFlag]) -> str:
    """What to write instead of an `[options]` key that is no flag's name."""
    settable = [name for name in known if name not in RESERVED]
    spelled = key.lower().replace("_", "-")
    if spelled in settable:
        return f"keys are its flag names as `ab` spells them; write {spelled}"
    close = difflib.get_close_matches(key, settable, n=1)
    if close:
        return f"keys are its flag names exactly; did you mean {close[0]}?"
    return "keys are its flag names exactly (see its --help)"


def _flag_argv(flag: AbFlag, key: str, value: object, path: Path) -> list[str]:
    """``--NAME=VALUE`` for an `[options]` value: ``--NAME`` for a switch that is true; a list
    one flag per item for a flag that repeats, joined by commas for a flag that takes a
    comma-separated list, and refused for any other flag (argparse would keep its last item)."""
    if flag.takes is Takes.NOTHING:
        if not isinstance(value, bool):
            raise CompileAheadError(
                f"{path}: options.{key}: --{flag.name} is a switch: write {key} = true "
                "(or leave it out)"
            )
        return [f"--{flag.name}"] if value else []
    if not isinstance(value, list):
        return [f"--{flag.name}={_value(value, flag, key, path)}"]
    items = [_value(v, flag, f"{key}[{n}]", path) for n, v in enumerate(value)]
    if flag.takes is Takes.REPEATED:
        return [f"--{flag.name}={item}" for item in items]
    if flag.takes is Takes.ONE:
        raise CompileAheadError(
            f"{path}: options.{key} is a list, but --{flag.name} takes one value: give one "
            "(a list is for a flag that repeats, or takes a comma-separated list)"
        )
    if not items:
        raise CompileAheadError(
            f"{path}: options.{key} is an empty list: give a value or remove it"
        )
    return [f"--{flag.name}={','.join(items)}"]


def _value(value: object, flag: AbFlag, where: str, path: Path) -> str:
    """A value of a flag's `[options]` key as its command line writes it."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise CompileAheadError(
            f"{path}: options.{where} must be a string or a number (--{flag.name} takes "
            f"{flag.takes.value})"
        )
    return str(value)


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
    from compile_ahead.profiling.trials.compile_kind.endpoints import compile_endpoints
    from compile_ahead.profiling.trials.schedule_kind.endpoints import schedule_endpoints
    from compile_ahead.runtime.ladder.settings.capacities import Ladder

    batch = max((b for b in batches if isinstance(b, int)), default=1)
    keys: dict[str, None] = {}
    for text in ladders:
        rungs = Ladder.parse(text).rungs
        if kind == "compile":
            pass_profile = options.get("pass-profile") is True  # keys: `ab`'s flag names
            eps = compile_endpoints(rungs, pass_profile, options.get("counters") is True)
        else:
            eps = schedule_endpoints(rungs, batch)
        keys |= dict.fromkeys(e.key for e in eps)
    return list(keys)
