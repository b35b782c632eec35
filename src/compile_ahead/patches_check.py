"""`compile-ahead patches check`: is an npu_compiler checkout ready for patches/npu_compiler?

Checks the checkout's commit against the pin (patches/npu_compiler/pin.toml), recognises a tree
that already caches sorted dependency vectors (newer upstream) or already carries this series,
runs ``git apply --check`` for the series, and prints what to do next. It never builds anything:
building the compiler follows upstream's own guide.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compile_ahead.errors import CompileAheadError

ASYNC_DEPS_HEADER = "src/vpux_compiler/include/vpux/compiler/core/async_deps_info.hpp"
ASYNC_DEPS_SOURCE = "src/vpux_compiler/src/core/async_deps_info.cpp"
BUILD_GUIDES = (
    "src/vpux_driver_compiler/docs/how_to_build_driver_compiler_on_linux.md",
    "guides/how-to-build.md",
)
# Declarations by which a tree shows it already memoizes the sorted vectors on its own.
UPSTREAM_CACHE_MARKERS = (
    re.compile(r"\b\w*(?:Deps|Consumer)\w*VecCache\b"),
    re.compile(r"\bgetCached\w*Deps\w*\("),
    re.compile(r"mutable\s+[^;]*[Cc]ache[^;]*;"),
)
SERIES_MARKER = "vpux/compiler/core/sorted_deps_cache.hpp"


@dataclass(frozen=True)
class Pin:
    commit: str
    date: str
    tag: str
    openvino_release: str
    openvino_commit: str
    patches: tuple[Path, ...]
    added: dict[str, str]
    modified: tuple[str, ...]

    @classmethod
    def load(cls, patches_dir: Path) -> Pin:
        pin_file = patches_dir / "pin.toml"
        try:
            data = tomllib.loads(pin_file.read_text())
        except FileNotFoundError:
            raise CompileAheadError(f"no pin file at {pin_file}") from None
        except (OSError, UnicodeDecodeError) as err:
            raise CompileAheadError(f"{pin_file}: cannot read ({err})") from None
        except tomllib.TOMLDecodeError as err:
            raise CompileAheadError(f"{pin_file}: not valid TOML ({err})") from None

        def text(key: str) -> str:
            return _pin_value(pin_file, data, key, str)

        def names(key: str) -> list[str]:
            value = _pin_value(pin_file, data, key, list)
            if not all(isinstance(item, str) for item in value):
                raise CompileAheadError(f"{pin_file}: {key} must be a list of strings")
            return value

        def paths(key: str) -> dict[str, str]:
            value = _pin_value(pin_file, data, key, dict)
            if not all(isinstance(item, str) for item in value.values()):
                raise CompileAheadError(f"{pin_file}: {key} values must be strings (paths)")
            return dict(value)

        # Read in file order, so the first problem reported is the first in the file.
        return cls(
            commit=text("npu_compiler.commit"),
            date=text("npu_compiler.date"),
            tag=text("npu_compiler.tag"),
            openvino_release=text("openvino.release"),
            openvino_commit=text("openvino.commit"),
            patches=tuple(patches_dir / name for name in names("series.patches")),
            added=paths("series.added"),
            modified=tuple(names("series.modified.files")),
        )


def _pin_value(pin_file: Path, data: dict, key: str, kind: type) -> Any:
    """data[a][b]... for the dotted key, of the given type, or a one-line error naming it."""
    value: object = data
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise CompileAheadError(f"{pin_file}: {key} is missing")
        value = value[part]
    if not isinstance(value, kind):
        raise CompileAheadError(
            f"{pin_file}: {key} must be a {kind.__name__}, got {type(value).__name__}"
        )
    return value


@dataclass
class CheckResult:
    head: str
    at_pin: bool
    based_on_pin: bool = False  # HEAD descends from the pin (e.g. after `git am` of the series)
    upstream_cache: str | None = None  # "file: declaration" when the tree caches on its own
    already_applied: bool = False
    applies: bool = False
    apply_error: str = ""
    dirty: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        if self.upstream_cache is not None:
            return False
        return self.already_applied or (self.applies and self.at_pin)


def default_patches_dir() -> Path:
    """patches/npu_compiler of the source tree this module runs from, else of the cwd."""
    candidates = (
        Path(__file__).resolve().parents[2] / "patches" / "npu_compiler",
        Path.cwd() / "patches" / "npu_compiler",
    )
    for candidate in candidates:
        if (candidate / "pin.toml").is_file():
            return candidate
    raise CompileAheadError(
        "cannot find patches/npu_compiler "
        "(run from the compile-ahead source tree or pass --patches)"
    )


def _git(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(checkout), *args], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise CompileAheadError("git is not installed") from None


def _toplevel(checkout: Path) -> Path:
    if not checkout.exists():
        raise CompileAheadError(f"{checkout} does not exist")
    if not checkout.is_dir():
        raise CompileAheadError(f"{checkout} is not a directory")
    done = _git(checkout, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise CompileAheadError(f"{checkout} is not a git checkout (git: {done.stderr.strip()})")
    return Path(done.stdout.strip())


def _find_upstream_cache(root: Path) -> str | None:
    for rel in (ASYNC_DEPS_HEADER, ASYNC_DEPS_SOURCE):
        text = (root / rel).read_text(errors="replace")
        if SERIES_MARKER in text:
            return None  # our own series: reported as "already applied"
        for marker in UPSTREAM_CACHE_MARKERS:
            found = marker.search(text)
            if found:
                start = text.rfind("\n", 0, found.start()) + 1
                end = text.find("\n", found.end())
                return f"{rel}: {text[start : end if end >= 0 else None].strip()}"
    return None


def check_checkout(checkout: Path, pin: Pin) -> CheckResult:
    root = _toplevel(checkout)
    for rel in (ASYNC_DEPS_HEADER, ASYNC_DEPS_SOURCE):
        if not (root / rel).is_file():
            raise CompileAheadError(f"{root} is not an npu_compiler checkout: {rel} is missing")
    head = _git(root, "rev-parse", "HEAD")
    if head.returncode != 0:
        raise CompileAheadError(f"{root} has no commit checked out ({head.stderr.strip()})")
    result = CheckResult(head=head.stdout.strip(), at_pin=head.stdout.strip() == pin.commit)
    if not result.at_pin:
        ancestry = _git(root, "merge-base", "--is-ancestor", pin.commit, "HEAD")
        result.based_on_pin = ancestry.returncode == 0
    touched = [*pin.modified, *pin.added]
    status = _git(root, "status", "--porcelain", "--", *touched)
    result.dirty = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    result.upstream_cache = _find_upstream_cache(root)
    patches = [str(p) for p in pin.patches]
    reverse = _git(root, "apply", "--check", "--reverse", *patches)
    if reverse.returncode == 0:
        result.already_applied = True
        return result
    forward = _git(root, "apply", "--check", *patches)
    result.applies = forward.returncode == 0
    result.apply_error = forward.stderr.strip()
    return result


def report(result: CheckResult, checkout: Path, pin: Pin) -> list[str]:
    """Human-readable lines: the findings, then what to do next."""
    lines = [
        f"npu_compiler checkout: {checkout}",
        f"  HEAD {result.head[:12]}; pinned {pin.commit[:12]} ({pin.tag}, {pin.date}, "
        f"pairs with OpenVINO {pin.openvino_release} {pin.openvino_commit[:8]})",
    ]
    if result.at_pin:
        lines.append("  commit: at the pin")
    elif result.based_on_pin:
        lines.append("  commit: descends from the pin")
    else:
        lines.append(
            "  commit: NOT the pinned commit (the series was written and checked there;"
            f" git -C {checkout} checkout {pin.commit})"
        )
    for path in result.dirty:
        lines.append(f"  local changes in {path}")
    if result.upstream_cache:
        lines += [
            "  this tree already caches sorted dependency vectors itself:",
            f"    {result.upstream_cache}",
            "  The series is for releases before upstream's cache; do not apply it here.",
            "  (compile_ahead.profiling.depsort.read_loaded_counters() will report None for such a build.)",
        ]
        return lines
    if result.already_applied:
        lines.append("  series: already applied")
    elif result.applies:
        lines.append(f"  series: applies cleanly ({len(pin.patches)} patches, git apply --check)")
    else:
        lines.append("  series: does NOT apply:")
        lines += [f"    {line}" for line in result.apply_error.splitlines()]
        lines.append(f"  Check out the pinned commit: git -C {checkout} checkout {pin.commit}")
        return lines
    guides = [g for g in BUILD_GUIDES if (checkout / g).is_file()]
    guide = f": {checkout / guides[0]}" if guides else " (docs in the npu_compiler tree)"
    steps: list[list[str]] = []
    if not result.already_applied:
        series = " ".join(str(p) for p in pin.patches)
        steps.append([f"apply:  git -C {checkout} am {series}"])
    steps += [
        [
            f"build the compiler with upstream's own guide{guide}",
            f"against OpenVINO {pin.openvino_release} ({pin.openvino_commit}).",
        ],
        [
            "confirm the counters are exported:",
            "nm -D --defined-only <compiler library> | grep compile_ahead_depsort",
        ],
        [
            "once, run a compile with COMPILE_AHEAD_DEPSORT_SHADOW=1 (aborts on any mismatch);",
            "A/B with COMPILE_AHEAD_DEPSORT=off; read the counters in-process with",
            "compile_ahead.profiling.depsort.read_loaded_counters().",
        ],
    ]
    lines.append("next:")
    for number, step in enumerate(steps, start=1):
        lines.append(f"  {number}. {step[0]}")
        lines += [f"     {more}" for more in step[1:]]
    return lines


def _run_check(args: argparse.Namespace) -> int:
    patches_dir = args.patches or default_patches_dir()
    pin = Pin.load(patches_dir)
    checkout = args.npu_compiler.resolve()
    result = check_checkout(checkout, pin)
    print("\n".join(report(result, checkout, pin)))
    return 0 if result.ok else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "patches", help="patch series for upstream projects (patches/)", description=__doc__
    )
    commands = parser.add_subparsers(dest="patches_command", required=True, metavar="ACTION")
    check = commands.add_parser(
        "check",
        help="check an npu_compiler checkout against the pinned commit and the series",
        description="Exit 0 when the checkout is at the pin and the series applies (or is "
        "already applied); 1 otherwise.",
    )
    check.add_argument("--npu-compiler", type=Path, required=True, metavar="PATH")
    check.add_argument(
        "--patches",
        type=Path,
        default=None,
        metavar="DIR",
        help="the series directory (default: patches/npu_compiler of the source tree)",
    )
    check.set_defaults(func=_run_check)
