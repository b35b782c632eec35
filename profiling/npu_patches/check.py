"""Is an npu_compiler checkout ready for patches/npu_compiler? (`compile-ahead patches check`)

Checks the checkout's commit against the pin (patches/npu_compiler/pin.toml), recognises a tree
that already caches sorted dependency vectors (newer upstream) or carries the series (all of it
or its first patches), runs ``git apply --check`` for what remains, and prints a verdict with its
reasons and what to do next. It never builds anything: building the compiler follows upstream's
own guide.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
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
    applied: list[str] = field(default_factory=list)  # patch names already in the tree, in order
    remaining: list[str] = field(default_factory=list)  # patch names still to apply, in order
    applies: bool = False  # the remaining patches apply cleanly
    apply_error: str = ""
    # Files the series touches whose content is not the pin's (plus the applied patches).
    changed_since_pin: list[str] = field(default_factory=list)
    dirty: list[str] = field(default_factory=list)

    @property
    def already_applied(self) -> bool:
        return bool(self.applied) and not self.remaining

    def problems(self) -> list[str]:
        """Why the checkout is not ready for building the patched compiler; empty when it is."""
        if self.upstream_cache is not None:
            return ["this tree already caches sorted dependency vectors itself"]
        found = []
        if not self.already_applied and not (self.at_pin or self.based_on_pin):
            found.append("HEAD is neither the pinned commit nor a descendant of it")
        if self.changed_since_pin:
            found.append(
                "files the series touches differ from the pinned ones: "
                + ", ".join(self.changed_since_pin)
            )
        if not self.already_applied:
            still = ", ".join(_number(name) for name in self.remaining)
            if not self.applies:
                found.append(
                    f"{still} do not apply on top of the applied patches"
                    if self.applied
                    else "the series does not apply"
                )
            elif self.applied:
                found.append(f"the series is partly applied; still to apply: {still}")
        return found

    @property
    def ok(self) -> bool:
        return not self.problems()


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


def _git(
    checkout: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(checkout), *args],
            capture_output=True,
            text=True,
            check=False,
            env=None if env is None else {**os.environ, **env},
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


def _applied_prefix(root: Path, patches: list[Path]) -> int:
    """How many leading patches of the series the tree already carries (0 to all of them)."""
    for count in range(len(patches), 0, -1):
        # Reversed last first: a later patch may change what an earlier one added.
        newest_first = [str(p) for p in reversed(patches[:count])]
        if _git(root, "apply", "--check", "--reverse", *newest_first).returncode == 0:
            return count
    return 0


def _changed_since_pin(root: Path, pin: Pin, applied: list[Path]) -> list[str]:
    """Files the series touches whose working-tree content differs from the pin's with the
    applied patches on top (an added file absent from both counts as unchanged)."""
    with tempfile.TemporaryDirectory() as scratch:
        index = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        steps: list[tuple[str, ...]] = [("read-tree", pin.commit)]
        if applied:
            steps.append(("apply", "--cached", *[str(p) for p in applied]))
        steps.append(("write-tree",))
        for step in steps:
            done = _git(root, *step, env=index)
            if done.returncode != 0:
                raise CompileAheadError(f"git {step[0]} failed in {root}: {done.stderr.strip()}")
        tree = done.stdout.strip()
    changed = []
    for rel in [*pin.modified, *pin.added]:
        expected = subprocess.run(
            ["git", "-C", str(root), "cat-file", "blob", f"{tree}:{rel}"],
            capture_output=True,
            check=False,
        )
        path = root / rel
        actual = path.read_bytes() if path.is_file() else None
        if actual != (expected.stdout if expected.returncode == 0 else None):
            changed.append(rel)
    return changed


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
    count = _applied_prefix(root, list(pin.patches))
    result.applied = [p.name for p in pin.patches[:count]]
    result.remaining = [p.name for p in pin.patches[count:]]
    if result.remaining:
        forward = _git(root, "apply", "--check", *[str(p) for p in pin.patches[count:]])
        result.applies = forward.returncode == 0
        result.apply_error = forward.stderr.strip()
    if result.based_on_pin:
        # Past the pin, the series is only as good as the files it was written against.
        result.changed_since_pin = _changed_since_pin(root, pin, list(pin.patches[:count]))
    return result


def _number(patch_name: str) -> str:
    """0001 for 0001-core-add-....patch."""
    return patch_name.split("-", 1)[0]


def report(result: CheckResult, checkout: Path, pin: Pin) -> list[str]:
    """Human-readable lines: the findings, then what to do next."""
    lines = _commit_lines(result, checkout, pin)
    if result.upstream_cache:
        return [
            *lines,
            "  this tree already caches sorted dependency vectors itself:",
            f"    {result.upstream_cache}",
            "  The series is for releases before upstream's cache; do not apply it here.",
            "  (compile_ahead.profiling.npu_patches.depsort.read_loaded_counters() reports "
            "None for such a build.)",
        ]
    lines += _series_lines(result, checkout, pin)
    problems = result.problems()
    lines.append("result: " + ("ready" if not problems else "NOT ready: " + "; ".join(problems)))
    if result.remaining and not result.applies:
        if not (result.at_pin or result.based_on_pin):
            lines.append(f"  Check out the pinned commit: git -C {checkout} checkout {pin.commit}")
        elif result.changed_since_pin:
            lines.append(
                f"  Apply the series on the pin itself: git -C {checkout} checkout {pin.commit}"
            )
        else:
            lines.append(
                f"  The tree differs from what the series expects (git -C {checkout} status)"
            )
        return lines
    return lines + _next_steps(result, checkout, pin)


def _commit_lines(result: CheckResult, checkout: Path, pin: Pin) -> list[str]:
    """Where HEAD stands against the pin, and local changes."""
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
    return lines + [f"  local changes in {path}" for path in result.dirty]


def _series_lines(result: CheckResult, checkout: Path, pin: Pin) -> list[str]:
    """Which patches are applied, whether the rest apply, and what changed since the pin."""
    verdict = "apply cleanly" if result.applies else "do NOT apply:"
    if result.already_applied:
        lines = [f"  series: already applied ({len(pin.patches)} patches)"]
    elif result.applied:
        applied = ", ".join(_number(name) for name in result.applied)
        still = ", ".join(_number(name) for name in result.remaining)
        lines = [f"  series: {applied} already applied; {still} still to apply and {verdict}"]
    elif result.applies:
        lines = [f"  series: applies cleanly ({len(pin.patches)} patches, git apply --check)"]
    else:
        lines = ["  series: does NOT apply:"]
    if result.remaining and not result.applies:
        lines += [f"    {line}" for line in result.apply_error.splitlines()]
    if result.changed_since_pin:
        files = " ".join(result.changed_since_pin)
        lines += [
            "  changed since the pin, in files the series touches (it was written against the",
            "  pinned ones; a new place that changes AsyncDepsInfo's maps needs its own hook):",
            *[f"    {path}" for path in result.changed_since_pin],
            f"    review: git -C {checkout} diff {pin.commit[:12]} -- {files}",
        ]
    return lines


def _next_steps(result: CheckResult, checkout: Path, pin: Pin) -> list[str]:
    guides = [g for g in BUILD_GUIDES if (checkout / g).is_file()]
    guide = f": {checkout / guides[0]}" if guides else " (docs in the npu_compiler tree)"
    steps: list[list[str]] = []
    if result.remaining:
        series = " ".join(str(p) for p in pin.patches if p.name in result.remaining)
        steps.append([f"apply:  git -C {checkout} am {series}"])
    steps += [
        [
            f"build the compiler with upstream's own guide{guide}",
            f"against OpenVINO {pin.openvino_release} ({pin.openvino_commit}).",
        ],
        [
            "confirm the counters are exported:",
            "nm -D --defined-only libnpu_driver_compiler.so | grep compile_ahead_depsort",
            "(likewise the npu_mlir_compiler module, when the build makes one)",
        ],
        [
            "once, run a compile with COMPILE_AHEAD_DEPSORT_SHADOW=1 (aborts on any mismatch);",
            "A/B with COMPILE_AHEAD_DEPSORT=off; read the counters in-process with",
            "compile_ahead.profiling.npu_patches.depsort.read_loaded_counters().",
        ],
    ]
    lines = ["next:"]
    for number, step in enumerate(steps, start=1):
        lines.append(f"  {number}. {step[0]}")
        lines += [f"     {more}" for more in step[1:]]
    return lines
