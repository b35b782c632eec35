"""A campaign file (TOML) and its cells, validated whole before anything is written.

    [campaign]
    name = "seed-generality"          # optional (default: the file's stem)
    kind = "schedule"                 # compile | schedule | baselines: the `ab` experiment
    pairs = 5                         # measured blocks per cell
    warmup = 1                        # unmeasured trials per arm before each block (its node)
    arms = ["i1", "i2"]               # schedules; for compile: arms.py (versions, interpreters)
    timeout = 7200                    # optional: seconds per trial (`ab --timeout`)

    [axes]                            # the grid: every combination is one cell
    model = ["qwen2.5-0.5b", "qwen2.5-1.5b"]
    synthetic_dtype = ["bf16", "f16"] # a preset's synthetic weights
    ladder = ["1024,2048,4096", "2048,4096,8192"]
    ov_config = [[], ["INFERENCE_PRECISION_HINT=f32"]]   # compile properties per cell
    batch = [1, 2, 4, 8]              # sequences per trial (schedule, baselines: --batch)

    [options]                         # any other `ab KIND` flag, the same in every cell,
    prompt-len = 128                  # by its exact name; a list as the flag takes one
                                      # (spec_text.py)

    [report]
    endpoints = ["critical_path"]     # optional: keys of endpoints the cells measure, for the
                                      # cross-cell table (nothing else in this table)

Each cell is the `ab KIND` command line these give, checked by the `ab` command's own parser
and checks (given to load_spec by the `campaign` command), so a flag `ab` refuses is refused
before the campaign starts, as is a compile property a cell's device does not take. No key or
string of the file may hold a control or format character (spec_text.py). The store keeps
the campaign's identity (identity.py), which a resumed campaign must match.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.campaigns.definition.environments import built_environment
from compile_ahead.profiling.campaigns.definition.validation.ab_flags import AbFlag
from compile_ahead.profiling.campaigns.definition.validation.arms import (
    CampaignArm,
    parse_campaign_arm,
)
from compile_ahead.profiling.campaigns.definition.validation.axes import (
    check_axes_for_kind,
    check_axis_values,
)
from compile_ahead.profiling.campaigns.definition.validation.identity import campaign_identity
from compile_ahead.profiling.campaigns.definition.validation.limits import check_grid_size
from compile_ahead.profiling.campaigns.definition.validation.spec_text import (
    check_endpoints,
    check_text,
    option_flags,
    report_table,
)
from compile_ahead.shown_text import hidden_character


# Checks one cell's `ab KIND ...` command line as `ab` does before any work (one line if not).
class CheckCell(Protocol):
    """The `ab` command's checks of a campaign (commands/ab.py): a cell's command line, and
    the long flags of `ab KIND` that an ``[options]`` key may name."""

    def __call__(self, argv: list[str]) -> None: ...

    def flags(self, kind: str) -> dict[str, AbFlag]: ...


# Told (cells checked, cells) as the cells are checked (limits.CheckProgress).
Progress = Callable[[int, int], None]

KINDS = ("compile", "schedule", "baselines")
AXES = ("model", "synthetic_dtype", "ladder", "ov_config", "batch")
_AXIS_FLAGS = {
    "model": "--model",
    "synthetic_dtype": "--synthetic-dtype",
    "ladder": "--ladder",
    "batch": "--batch",
}
_TABLES = {"campaign", "axes", "options", "report"}
_CAMPAIGN_KEYS = {"name", "kind", "pairs", "warmup", "arms", "timeout"}


@dataclass(frozen=True)
class Cell:
    index: int
    axes: dict[str, object]  # axis -> this cell's value, as the spec wrote it
    model: str
    synthetic_dtype: str | None
    argv: tuple[str, ...]  # `ab KIND ...` without arms of a compile cell and per-block flags
    arm_items: tuple[str, ...] = ()  # compile: properties added to every arm (ov_config axis)

    @property
    def label(self) -> str:
        return ", ".join(f"{axis}={_value_text(v)}" for axis, v in self.axes.items())

    @property
    def dirname(self) -> str:
        slug = "_".join(_value_text(v) for v in self.axes.values())
        return f"cell{self.index:02d}-{re.sub(r'[^A-Za-z0-9._-]+', '-', slug)[:80]}"


@dataclass(frozen=True)
class CampaignSpec:
    path: Path
    text: str
    name: str
    kind: str
    pairs: int
    warmup: int
    timeout: float | None
    arms: tuple[str, ...]
    axes: dict[str, list]
    options: dict[str, object]
    cells: tuple[Cell, ...]
    compile_arms: tuple[CampaignArm, ...] = ()
    report_endpoints: tuple[str, ...] | None = None
    canonical: dict = field(default_factory=dict)
    identity: dict = field(default_factory=dict)  # identity.py: what its store must match

    @property
    def digest(self) -> str:
        """What a resumed campaign must match: everything that defines its experiments."""
        text = json.dumps(self.canonical, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def blocks(self) -> int:
        return len(self.cells) * self.pairs


def _value_text(value: object) -> str:
    if isinstance(value, list):
        return "+".join(map(str, value)) or "none"
    return str(value)


def _load_toml(path: Path) -> tuple[str, dict]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise CompileAheadError(f"{path}: cannot read the campaign ({err})") from None
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise CompileAheadError(f"{path}: not valid TOML ({err})") from None


def _table(data: dict, name: str, path: Path) -> dict:
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise CompileAheadError(f"{path}: [{name}] must be a table")
    return table


def _check_keys(data: dict, path: Path) -> None:
    unknown = sorted(set(data) - _TABLES)
    loose = [key for key in unknown if not isinstance(data[key], dict)]
    if loose:
        raise CompileAheadError(
            f"{path}: {loose[0]} is outside any table: keys go under [campaign], [axes], "
            "[options] or [report]"
        )
    if unknown:
        raise CompileAheadError(
            f"{path}: unknown table [{unknown[0]}]; tables: {', '.join(sorted(_TABLES))}"
        )
    unknown = sorted(set(_table(data, "campaign", path)) - _CAMPAIGN_KEYS)
    if unknown:
        raise CompileAheadError(
            f"{path}: unknown key campaign.{unknown[0]}; keys: {', '.join(sorted(_CAMPAIGN_KEYS))}"
        )
    unknown = sorted(set(_table(data, "axes", path)) - set(AXES))
    if unknown:
        raise CompileAheadError(f"{path}: unknown axis {unknown[0]!r}; axes: {', '.join(AXES)}")


def _check_has_campaign(data: dict, path: Path) -> None:
    """A file with no [campaign] table (an empty one, or only comments) is refused as that,
    not by the first of its keys it lacks."""
    if not data:
        raise CompileAheadError(
            f"{path}: the campaign file is empty (no [campaign] table): it needs [campaign] "
            "(kind, pairs, arms) and [axes] (model = [...])"
        )
    if "campaign" not in data:
        raise CompileAheadError(f"{path}: no [campaign] table: it gives kind, pairs and arms")


def _integer(value: object, key: str, low: int, path: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise CompileAheadError(f"{path}: campaign.{key} must be an integer >= {low}")
    return value


def _campaign(table: dict, path: Path) -> dict:
    kind = table.get("kind")
    if kind not in KINDS:
        raise CompileAheadError(f"{path}: campaign.kind must be one of {', '.join(KINDS)}")
    arms = table.get("arms")
    if not isinstance(arms, list) or not all(isinstance(a, str) and a.strip() for a in arms):
        raise CompileAheadError(f'{path}: campaign.arms must be a list of arms, e.g. ["i1", "i2"]')
    if len(arms) < 2:
        raise CompileAheadError(f"{path}: campaign.arms needs at least two arms, got {len(arms)}")
    timeout = table.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise CompileAheadError(f"{path}: campaign.timeout must be a positive number of seconds")
    name = table.get("name", path.stem)
    if not isinstance(name, str) or not name.strip():
        raise CompileAheadError(f"{path}: campaign.name must be a non-empty string")
    if hidden_character(name) is not None:  # a name from the file's own name
        raise CompileAheadError(
            f"{path}: the campaign's name {name!r} holds a control or format character "
            f'({hidden_character(name)}); give it a name = "..."'
        )
    return {
        "name": name,
        "kind": kind,
        "arms": tuple(a.strip() for a in arms),
        "pairs": _integer(table.get("pairs"), "pairs", 1, path),
        "warmup": _integer(table.get("warmup", 1), "warmup", 0, path),
        "timeout": None if timeout is None else float(timeout),
    }


def _axes(table: dict, path: Path) -> dict[str, list]:
    """The axes in AXES order (a spec without an axis keeps the cells it always had)."""
    if "model" not in table:
        raise CompileAheadError(f"{path}: [axes] needs model = [...] (one or more models)")
    return {axis: check_axis_values(axis, table[axis], path) for axis in AXES if axis in table}


def _cell_argv(
    kind: str, axes: dict[str, object], arms: tuple[str, ...], options: list[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(`ab KIND` flags of a cell, properties a compile cell adds to each arm)."""
    argv = ["ab", kind]
    for axis, flag in _AXIS_FLAGS.items():
        if axis in axes:
            argv += [flag, str(axes[axis])]
    ov_config = axes.get("ov_config", [])  # checked: a list of KEY=VALUE strings
    props = tuple(str(p) for p in ov_config) if isinstance(ov_config, list) else ()
    if kind != "compile":
        for prop in props:
            argv += ["--ov-config", prop]
        argv += ["--arms", ",".join(arms)]
        props = ()
    return tuple(argv + options), props


def _make_cells(
    kind: str, axes: dict[str, list], arms: tuple[str, ...], flags: list[str]
) -> tuple[Cell, ...]:
    cells = []
    for index, values in enumerate(itertools.product(*axes.values())):
        chosen = dict(zip(axes, values, strict=True))
        argv, props = _cell_argv(kind, chosen, arms, flags)
        dtype = chosen.get("synthetic_dtype")
        cells.append(
            Cell(
                index,
                chosen,
                str(chosen["model"]),
                None if dtype is None else str(dtype),
                argv,
                props,
            )
        )
    return tuple(cells)


def block_flags(pairs: int, warmup: int, first_block: int, timeout: float | None) -> list[str]:
    """The flags that make a cell's `ab` command run one block of its design."""
    flags = ["--pairs", str(pairs), "--warmup", str(warmup), "--first-block", str(first_block)]
    flags += ["--quiet", "--no-plot"]
    return flags + ([] if timeout is None else ["--timeout", f"{timeout:g}"])


def compile_arm_flags(
    arms: tuple[CampaignArm, ...], props: tuple[str, ...], python: Callable[[str], str]
) -> list[str]:
    """``--arm NAME=SPEC`` per arm, versions resolved by ``python(version)``."""
    flags: list[str] = []
    for arm in arms:
        spec = arm.ab_spec(python)
        flags += ["--arm", ",".join([spec, *props])]
    return flags


def _check_cell(spec: CampaignSpec, cell: Cell, check: CheckCell) -> None:
    """The cell's `ab` command line as `ab` checks it before any model or trial (an arm named
    by release as its environment here, or as this interpreter where none is built yet)."""
    argv = list(cell.argv)
    if spec.kind == "compile":
        python = lambda v: str(built_environment(v) or sys.executable)  # noqa: E731
        argv += compile_arm_flags(spec.compile_arms, cell.arm_items, python)
    argv += block_flags(spec.pairs, spec.warmup, 0, spec.timeout)
    try:
        check(argv)
    except CompileAheadError as err:
        raise CompileAheadError(f"{spec.path}: cell {cell.label}: ab {spec.kind}: {err}") from None


def load_spec(path: Path, check: CheckCell, progress: Progress | None = None) -> CampaignSpec:
    """The campaign at ``path``, every cell checked by ``check`` (the `ab` command's own
    checks of a command line, ``progress`` told as they go); one line naming the first
    problem, a grid beyond limits.py's bounds refused before any cell is made."""
    text, data = _load_toml(path)
    check_text(data, path)
    _check_keys(data, path)
    _check_has_campaign(data, path)
    camp = _campaign(_table(data, "campaign", path), path)
    axes = _axes(_table(data, "axes", path), path)
    check_axes_for_kind(axes, camp["kind"], path)
    check_grid_size(path, math.prod(len(v) for v in axes.values()), camp["pairs"])
    options = _table(data, "options", path)
    flags = option_flags(options, camp["kind"], check.flags(camp["kind"]), path)
    compile_arms: tuple[CampaignArm, ...] = ()
    if camp["kind"] == "compile":
        compile_arms = tuple(parse_campaign_arm(a, str(path)) for a in camp["arms"])
        names = [a.name for a in compile_arms]
        if len(set(names)) != len(names):
            raise CompileAheadError(f"{path}: two arms are named alike ({', '.join(names)})")
    elif any(a.startswith("openvino") for a in camp["arms"]):
        raise CompileAheadError(
            f"{path}: installations by version are arms of compile campaigns; {camp['kind']} "
            "arms are schedules run by this installation's compile-ahead"
        )
    endpoints = report_table(_table(data, "report", path), path)
    canonical = {k: camp[k] for k in ("kind", "pairs", "warmup", "timeout", "arms")}
    canonical |= {"axes": axes, "options": options}
    spec = CampaignSpec(
        path,
        text,
        camp["name"],
        camp["kind"],
        camp["pairs"],
        camp["warmup"],
        camp["timeout"],
        camp["arms"],
        axes,
        dict(options),
        _make_cells(camp["kind"], axes, camp["arms"], flags),
        compile_arms,
        endpoints,
        canonical,
    )
    for checked, cell in enumerate(spec.cells, 1):
        _check_cell(spec, cell, check)
        if progress is not None:
            progress(checked, len(spec.cells))
    if endpoints is not None:
        ladders = axes.get("ladder", ["default"])
        batches = axes.get("batch", [])
        check_endpoints(endpoints, camp["kind"], map(str, ladders), options, path, batches)
    try:
        identity = campaign_identity(canonical, spec.kind, spec.arms, compile_arms, options)
    except CompileAheadError as err:
        raise CompileAheadError(f"{path}: {err}") from None
    return replace(spec, identity=identity)
