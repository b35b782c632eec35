"""A compile campaign's arms: `ab compile --arm` specs whose installation may also be a version.

An arm is ``[NAME=]ITEM,ITEM,...`` where at most one item says which OpenVINO runs:

  openvino==X.Y.Z    a release from the package index, in its own environment (environments.py),
                     built once per machine in the user cache
  current            the interpreter that runs the campaign (the default)
  PATH, python=PATH, venv=DIR, lib=DIR   an interpreter, venv or library dir, as `ab` takes them

and the other items are `ab`'s: KEY=VALUE compile properties, config=FILE.json, env.VAR=VALUE.
Without NAME the arm is named by its installation (``ov2025.4.1``, ``current``). A version is
resolved to an interpreter on the machine that runs the block, so every node builds its own.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials.arms import parse_arm

VERSION_PREFIX = "openvino=="
_INSTALL_KEYS = ("python=", "venv=", "lib=")
# Any requirement on openvino (openvino>=X, openvino~=X, ...): only == names one release.
_REQUIREMENT = re.compile(r"^openvino\s*(==|>=|<=|~=|!=|===|>|<|=)")


@dataclass(frozen=True)
class CampaignArm:
    name: str
    items: tuple[str, ...]  # as written, the version item included
    version: str | None  # X.Y.Z of an openvino==X.Y.Z item

    def ab_spec(self, version_python: Callable[[str], str]) -> str:
        """``NAME=SPEC`` for `ab compile --arm`, the version item replaced by the interpreter
        ``version_python(version)`` returns (its environment on this machine)."""
        items = [
            f"python={version_python(self.version)}"
            if self.version is not None and item.startswith(VERSION_PREFIX)
            else item
            for item in self.items
        ]
        return f"{self.name}={','.join(items)}"


def _version(item: str, what: str) -> str:
    text = item[len(VERSION_PREFIX) :].strip()
    try:
        Version(text)
    except InvalidVersion:
        raise CompileAheadError(
            f"{what}: {item!r} is not a release: write openvino==X.Y.Z, e.g. openvino==2025.4.1"
        ) from None
    return text


def _installation(item: str, what: str) -> str | None:
    """'version', 'current', 'path' for an installation item; None for any other item."""
    if item.startswith(VERSION_PREFIX):
        return "version"
    if _REQUIREMENT.match(item):
        raise CompileAheadError(
            f"{what}: {item!r} is not a release: write openvino==X.Y.Z, e.g. openvino==2025.4.1"
        )
    if item == "current":
        return "current"
    if item.startswith(_INSTALL_KEYS):
        return "path"
    if "=" in item:
        return None  # a property, config= or env. item: `ab` checks it
    if not Path(item).expanduser().exists():
        raise CompileAheadError(
            f"{what}: {item!r} is neither a release (openvino==X.Y.Z), an interpreter, venv or "
            "library directory that exists, nor current"
        )
    return "path"


def _split_name(text: str) -> tuple[str | None, str]:
    """(NAME or None, SPEC): a bare spec starts with its first item, which has no '=' before
    a ',' unless it is a version or an install key."""
    first = text.split(",", 1)[0]
    if _REQUIREMENT.match(first) or first.startswith(_INSTALL_KEYS) or "=" not in first:
        return None, text
    name, _, spec = text.partition("=")
    return name.strip(), spec


def release_of(text: str) -> str | None:
    """The X.Y.Z of an arm written with an openvino==X.Y.Z item, else None (not checked: the
    spec was when its store was made)."""
    _, spec = _split_name(text.strip())
    items = [i.strip() for i in spec.split(",")]
    return next((i[len(VERSION_PREFIX) :] for i in items if i.startswith(VERSION_PREFIX)), None)


def _absolute(item: str, kind: str | None) -> str:
    """A path item made absolute here, so a block, which runs in its own directory, finds
    what the spec was checked with (a relative path is relative to where the campaign runs)."""
    key, sep, value = item.partition("=")
    if kind == "path" and not sep:
        return str(Path(item).expanduser().absolute())
    if (kind == "path" or key == "config") and sep:
        return f"{key}={Path(value).expanduser().absolute()}"
    return item


def parse_campaign_arm(text: str, where: str) -> CampaignArm:
    """One arm of the spec, checked as `ab compile --arm` checks it (versions aside)."""
    what = f"{where}: arm {text!r}"
    name, spec = _split_name(text.strip())
    items = tuple(i.strip() for i in spec.split(",") if i.strip())
    if not items:
        raise CompileAheadError(f"{what}: names no installation or property")
    kinds = [(item, _installation(item, what)) for item in items]
    installs = [(item, kind) for item, kind in kinds if kind is not None]
    if len(installs) > 1:
        raise CompileAheadError(
            f"{what}: names {len(installs)} installations ({', '.join(i for i, _ in installs)})"
        )
    version = next((_version(i, what) for i, kind in installs if kind == "version"), None)
    items = tuple(_absolute(item, kind) for item, kind in kinds)
    if name is None:
        name = f"ov{version}" if version is not None else installs[0][0] if installs else ""
        if not installs or installs[0][1] == "path":
            raise CompileAheadError(f"{what}: give it a name, NAME={spec}")
    # `ab`'s own parsing (name, paths, properties), the version standing in as this interpreter
    checked = [f"python={sys.executable}" if i.startswith(VERSION_PREFIX) else i for i in items]
    try:
        parse_arm(f"{name}={','.join(checked)}")
    except CompileAheadError as err:
        raise CompileAheadError(f"{where}: {err}") from None
    return CampaignArm(name, items, version)
