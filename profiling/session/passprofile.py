"""OpenVINO's per-transformation timings (``OV_ENABLE_PROFILE_PASS=<file>``), parsed and put
on the monotonic timeline of the ITT events.

Record lines, ``;``-separated, appended as each pass or manager finishes:

- ``t;<pass>;<manager>;<ns>;<applied>``: one pass run (duration only)
- ``m;<manager>;<ns>;<applied>``: a manager run, written after its passes
- ``m_start;<manager>;<epoch ns>`` and ``m_end;<manager>;<epoch ns>``: its wall-clock bounds

Managers nest (a pass may run a whole inner manager), so nesting comes from the bounds. Passes
have no start time of their own: they are laid end to end from their manager's start, which
places them to within the gaps between passes (the manager's total minus the passes' sum is
reported as ``unaccounted_ns``). A file cut short (a crash or a read during a compile) parses to
its complete records; the cut is reported in ``problems``.

A pass's self time is its duration minus the managers it ran inside it. Records are written as
things finish, so an inner manager's ``m`` record comes before the ``t`` record of the pass that
ran it: a nested manager belongs to the first pass of its parent manager written after it.

Standard library only: ``ab compile``'s trial worker loads this file by path under other
interpreters (another OpenVINO release's venv) where compile_ahead is not installed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

ENV = "OV_ENABLE_PROFILE_PASS"
BANNER = "PassManager started:"


@dataclass
class PassRun:
    name: str
    manager: str
    duration_ns: int
    applied: bool
    start_ns: int | None = None  # approximate, on the clock of the manager bounds
    seq: int = 0  # line number of its record (file order = order of finishing)
    nested_ns: int = 0  # time in managers this pass ran

    @property
    def self_ns(self) -> int:
        return max(0, self.duration_ns - self.nested_ns)


@dataclass
class ManagerRun:
    name: str
    duration_ns: int
    applied: bool
    start_ns: int | None = None
    end_ns: int | None = None
    passes: list[PassRun] = field(default_factory=list)
    depth: int = 0
    parent: int | None = None  # index into PassProfile.managers
    seq: int = 0  # line number of its "m" record

    @property
    def unaccounted_ns(self) -> int:
        return self.duration_ns - sum(p.duration_ns for p in self.passes)


@dataclass
class PassProfile:
    managers: list[ManagerRun] = field(default_factory=list)
    orphan_passes: list[PassRun] = field(default_factory=list)  # manager never finished
    problems: list[str] = field(default_factory=list)

    @property
    def top_level(self) -> list[ManagerRun]:
        return [m for m in self.managers if m.parent is None]

    def total_ns(self) -> int:
        """Time inside outermost managers (nested ones are already counted in them)."""
        return sum(m.duration_ns for m in self.top_level)

    def self_times(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Per (manager, pass): (runs, total self ns), nested managers' time left out."""
        totals: dict[tuple[str, str], tuple[int, int]] = {}
        for manager in self.managers:
            for p in manager.passes:
                runs, ns = totals.get((p.manager, p.name), (0, 0))
                totals[(p.manager, p.name)] = (runs + 1, ns + p.self_ns)
        return totals

    def summary(self, top: int = 8) -> dict:
        """What a compile trial reports per rung: time in outermost managers, the number of
        pass records and the busiest manager names (nested time included)."""
        by_manager: dict[str, int] = {}
        for m in self.managers:
            by_manager[m.name] = by_manager.get(m.name, 0) + m.duration_ns
        busiest = sorted(by_manager.items(), key=lambda kv: -kv[1])[:top]
        return {
            "transformations_s": self.total_ns() / 1e9,
            "pass_records": sum(len(m.passes) for m in self.managers) + len(self.orphan_passes),
            "top_managers_s": {name: ns / 1e9 for name, ns in busiest},
            "problems": list(self.problems),
        }

    def pass_totals(self) -> dict[str, tuple[int, int]]:
        """Per pass name: (runs, total ns); a pass that runs a nested manager includes it."""
        totals: dict[str, tuple[int, int]] = {}
        for manager in self.managers:
            for p in manager.passes:
                runs, ns = totals.get(p.name, (0, 0))
                totals[p.name] = (runs + 1, ns + p.duration_ns)
        return totals

    def shifted(self, offset_ns: int) -> PassProfile:
        """The same profile with every absolute time moved by offset_ns (epoch -> monotonic)."""
        out = PassProfile(problems=list(self.problems), orphan_passes=list(self.orphan_passes))
        for m in self.managers:
            passes = [
                replace(p, start_ns=None if p.start_ns is None else p.start_ns + offset_ns)
                for p in m.passes
            ]
            moved = replace(
                m,
                start_ns=None if m.start_ns is None else m.start_ns + offset_ns,
                end_ns=None if m.end_ns is None else m.end_ns + offset_ns,
                passes=passes,
            )
            out.managers.append(moved)
        return out


@dataclass(frozen=True)
class PassTotal:
    """One pass's self time summed over every manager it ran in (and every profile given)."""

    name: str
    calls: int
    self_ns: int
    managers: int  # how many distinct managers ran it

    def to_json(self) -> dict:
        return {
            "pass": self.name,
            "calls": self.calls,
            "self_s": self.self_ns / 1e9,
            "self_ns": self.self_ns,
            "managers": self.managers,
        }


def pass_self_totals(profiles: Iterable[PassProfile]) -> list[PassTotal]:
    """Every pass's self time summed across managers and profiles (PassProfile.self_times),
    with its call count; the most time first, ties by name."""
    calls: dict[str, int] = {}
    self_ns: dict[str, int] = {}
    managers: dict[str, set[str]] = {}
    for profile in profiles:
        for (manager, name), (runs, ns) in profile.self_times().items():
            calls[name] = calls.get(name, 0) + runs
            self_ns[name] = self_ns.get(name, 0) + ns
            managers.setdefault(name, set()).add(manager)
    rows = [PassTotal(n, calls[n], self_ns[n], len(managers[n])) for n in calls]
    rows.sort(key=lambda r: (-r.self_ns, r.name))
    return rows


@dataclass(frozen=True)
class ClockPair:
    """A wall-clock and a monotonic reading taken together: maps epoch ns to monotonic ns."""

    epoch_ns: int
    monotonic_ns: int

    @classmethod
    def sample(cls) -> ClockPair:
        # Bracket the wall reading with two monotonic ones and take the midpoint.
        m0 = time.monotonic_ns()
        wall = time.time_ns()
        m1 = time.monotonic_ns()
        return cls(wall, (m0 + m1) // 2)

    @property
    def offset_ns(self) -> int:
        return self.monotonic_ns - self.epoch_ns


def _flag(text: str) -> bool:
    return text.strip() == "1"


def parse_lines(lines: Iterable[str]) -> PassProfile:
    """Parse complete record lines (see parse_text for a file that may be cut short)."""
    profile = PassProfile()
    pending: dict[str, list[PassRun]] = {}  # passes of a manager run not yet closed by its "m"
    awaiting_bounds: dict[str, list[ManagerRun]] = {}
    rows = list(lines)
    for number, raw in enumerate(rows, 1):
        line = raw.rstrip("\n")
        if not line.strip():
            continue
        fields = line.split(";")
        kind = fields[0]
        try:
            if kind == "t" and len(fields) == 5:
                run = PassRun(fields[1], fields[2], int(fields[3]), _flag(fields[4]), seq=number)
                pending.setdefault(run.manager, []).append(run)
            elif kind == "m" and len(fields) == 4:
                manager = ManagerRun(fields[1], int(fields[2]), _flag(fields[3]), seq=number)
                manager.passes = pending.pop(manager.name, [])
                profile.managers.append(manager)
                awaiting_bounds.setdefault(manager.name, []).append(manager)
            elif kind in ("m_start", "m_end") and len(fields) == 3:
                waiting = awaiting_bounds.get(fields[1])
                if not waiting:
                    raise ValueError("bounds for a manager with no record")
                stamp = int(fields[2])
                if kind == "m_start":
                    waiting[0].start_ns = stamp
                else:
                    waiting[0].end_ns = stamp
                    waiting.pop(0)
            else:
                raise ValueError(f"unknown record {kind!r} with {len(fields)} fields")
        except ValueError as err:
            profile.problems.append(f"line {number}: {err}: {line!r}")
    for name, runs in pending.items():
        profile.orphan_passes.extend(runs)
        profile.problems.append(f"{len(runs)} pass record(s) of {name!r} without a manager record")
    _nest(profile)
    _place_passes(profile)
    _attribute_nested(profile)
    return profile


def _nest(profile: PassProfile) -> None:
    """Parent and depth from the managers' bounds (containment)."""
    spans = [
        (m.start_ns, -m.end_ns, i)
        for i, m in enumerate(profile.managers)
        if m.start_ns is not None and m.end_ns
    ]
    timed = [i for _, _, i in sorted(spans)]
    stack: list[int] = []
    for i in timed:
        m = profile.managers[i]
        while stack and profile.managers[stack[-1]].end_ns <= m.start_ns:  # type: ignore[operator]
            stack.pop()
        if stack and m.end_ns <= profile.managers[stack[-1]].end_ns:  # type: ignore[operator]
            m.parent = stack[-1]
            m.depth = len(stack)
        stack.append(i)


def _place_passes(profile: PassProfile) -> None:
    for m in profile.managers:
        if m.start_ns is None:
            continue
        cursor = m.start_ns
        for p in m.passes:
            p.start_ns = cursor
            cursor += p.duration_ns


def _attribute_nested(profile: PassProfile) -> None:
    """Charge each nested manager to the pass of its parent that ran it: the parent's first
    pass whose record was written after the nested manager's. A nested manager written after
    all of its parent's passes ran between passes and stays in the parent's unaccounted time."""
    for child in profile.managers:
        if child.parent is None:
            continue
        host = next((p for p in profile.managers[child.parent].passes if p.seq > child.seq), None)
        if host is not None:
            host.nested_ns += child.duration_ns


def parse_text(text: str) -> PassProfile:
    """Parse file contents; an unterminated last line is a cut-off record and is left out."""
    lines = text.splitlines(keepends=True)
    cut = lines.pop() if lines and not lines[-1].endswith("\n") else None
    profile = parse_lines(lines)
    if cut is not None:
        profile.problems.insert(0, f"truncated: last record cut short ({cut!r} left out)")
    return profile


def parse_file(path: str | Path, start_byte: int = 0, end_byte: int | None = None) -> PassProfile:
    """Parse a profile file, or the byte range one compile appended to it."""
    with open(path, "rb") as f:
        f.seek(start_byte)
        data = f.read() if end_byte is None else f.read(max(0, end_byte - start_byte))
    return parse_text(data.decode(errors="replace"))


@contextmanager
def recording_passes(pass_file: Path | None) -> Iterator[None]:
    """OpenVINO's pass profiling into ``pass_file`` for what runs inside (None: off), its
    "PassManager started:" banners kept off stdout. OpenVINO reads ``OV_ENABLE_PROFILE_PASS``
    at every pass-manager run, so the pass managers outside (reading a model, converting an IR,
    probing the device) neither print a banner nor land in the file."""
    if pass_file is not None:
        os.environ[ENV] = str(pass_file)
    try:
        with without_pass_banners():
            yield
    finally:
        os.environ.pop(ENV, None)


@contextmanager
def without_pass_banners(stream: TextIO | None = None) -> Iterator[None]:
    """Hide the "PassManager started:" lines OpenVINO prints to stdout while pass profiling is
    on; everything else written to fd 1 meanwhile is passed through afterwards."""
    out = stream or sys.stdout
    out.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            capture.seek(0)
            kept = [
                line
                for line in capture.read().decode(errors="replace").splitlines(keepends=True)
                if not line.startswith(BANNER)
            ]
            if kept:
                out.write("".join(kept))
                out.flush()
