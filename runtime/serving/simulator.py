"""The simulator executor: the engine's buckets priced by a cost model on a virtual clock, so
the same scheduler and policies answer at scales this machine cannot hold.

A cost model (JSON, e.g. `compile-ahead serve --simulate COSTS.json`) prices:

- ``compile_s``, ``step_s``, ``bucket_bytes``: each a linear form of the bucket [B, C],
  ``{"base": a, "per_batch": b, "per_capacity": c, "per_slot": d, "table": {"BxC": v}}`` =
  a + b*B + c*C + d*B*C, unless the table names the bucket;
- ``prefill_s``: ``{"base": a, "per_token": b}`` per prompt, its tokens counted in whole
  calls of ``prefill_chunk`` tokens (default 1: as many as the prompt has), the last padded;
  ``step_s`` is one iteration of the engine that steps: the device's step and the engine's
  own work around it;
- ``prefill_compile_s``: what the first compile adds, the batch-1 prefill graph (compiled once,
  with the first bucket);
- ``activate_s``, ``copy_s_per_byte`` and ``kv_bytes_per_slot`` (one row's slot, every layer's
  K and V): a move between buckets takes activate_s plus what it copies times copy_s_per_byte;
  ``kv``: "copy" (every bucket its own KV: a move copies every live row, i1/i2 style) or
  "reserve" (one reservation for the top bucket: a move copies only the rows that change
  index, i3 style);
- ``background_step_factor``: a decode step's (and a prefill's) slowdown while a background
  compile runs (1 for a device whose decode does not share the host's cores; near 2 on a
  two-core host), and ``background_compile_factor``: a background compile's slowdown while
  the device works beside it (steps, prefills, switches, a foreground compile); while the
  engine idles it runs at its own pace, as a server's first compile does before any request.
  ``background_compile_factors`` names it apart per activity (``"step:B"``, a decode step of
  B rows; ``"prefill"``; ``"switch"``; ``"compile"``), the single factor pricing the rest;
- ``host_bytes``: memory besides the buckets and the KV (weights, runtime).

Tokens are not computed: every token is ``token`` (never EOS), so requests run to their
max_new_tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.input_files import read_input_text
from compile_ahead.runtime.serving.buckets import Bucket
from compile_ahead.runtime.serving.executor import (
    COMPILE,
    PREFILL,
    SWITCH,
    VirtualClock,
    activity_key,
    is_chunk,
    padded,
)

MAX_COST_FILE_BYTES = 4 * 2**20


@dataclass(frozen=True)
class Linear:
    """a + b*B + c*C + d*B*C, or the table's value for "BxC"."""

    base: float = 0.0
    per_batch: float = 0.0
    per_capacity: float = 0.0
    per_slot: float = 0.0
    table: Mapping[str, float] = field(default_factory=dict)

    def __call__(self, bucket: Bucket) -> float:
        if bucket.key in self.table:
            return float(self.table[bucket.key])
        b, c = bucket
        return self.base + self.per_batch * b + self.per_capacity * c + self.per_slot * b * c

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Linear:
        if isinstance(obj, int | float):
            return cls(base=float(obj))
        if not isinstance(obj, dict):
            raise CompileAheadError(f"{where}: a number or an object of coefficients")
        known = {"base", "per_batch", "per_capacity", "per_slot", "table"}
        _no_unknown(obj, known, where)
        table = obj.get("table", {})
        if not isinstance(table, dict) or not all(_nonneg(v) for v in table.values()):
            raise CompileAheadError(f'{where}.table: an object of bucket "BxC" to numbers >= 0')
        coeffs = {k: obj.get(k, 0.0) for k in known - {"table"}}
        for k, v in coeffs.items():
            if not _nonneg(v):
                raise CompileAheadError(f"{where}.{k}: a number >= 0")
        return cls(table=dict(table), **{k: float(v) for k, v in coeffs.items()})


@dataclass(frozen=True)
class CostModel:
    compile_s: Linear = Linear(base=1.0)
    step_s: Linear = Linear(base=0.01)
    bucket_bytes: Linear = Linear(base=2**30)
    prefill_base_s: float = 0.0
    prefill_per_token_s: float = 0.0
    prefill_compile_s: float = 0.0
    activate_s: float = 0.0
    copy_s_per_byte: float = 0.0
    kv_bytes_per_slot: int = 0
    background_step_factor: float = 1.0
    background_compile_factor: float = 1.0
    background_compile_factors: Mapping[str, float] = field(default_factory=dict)
    host_bytes: int = 0
    kv: str = "copy"
    prefill_chunk: int = 1  # tokens per prefill call: a prompt costs whole calls
    token: int = 1

    def prefill_s(self, tokens: int) -> float:
        """A prefill of ``tokens`` (already padded to whole calls: ``padded``)."""
        return self.prefill_base_s + self.prefill_per_token_s * tokens

    def kv_bytes(self, bucket: Bucket) -> int:
        return self.kv_bytes_per_slot * bucket.batch * bucket.capacity

    def compile_factor(self, activity: str) -> float:
        """A background compile's slowdown beside ``activity``."""
        return self.background_compile_factors.get(activity, self.background_compile_factor)

    @classmethod
    def from_json(cls, obj: Any, where: str = "cost model") -> CostModel:
        if not isinstance(obj, dict):
            raise CompileAheadError(f"{where}: a JSON object")
        known = {
            "compile_s", "step_s", "bucket_bytes", "prefill_s", "prefill_compile_s",
            "activate_s", "copy_s_per_byte", "kv_bytes_per_slot", "background_step_factor",
            "background_compile_factor", "background_compile_factors", "host_bytes", "kv", "note",
            "sources", "fitted_from", "prefill_chunk",
        }  # fmt: skip
        _no_unknown(obj, known, where)
        prefill = obj.get("prefill_s", {})
        if not isinstance(prefill, dict):
            raise CompileAheadError(f"{where}.prefill_s: an object with base and per_token")
        _no_unknown(prefill, {"base", "per_token"}, f"{where}.prefill_s")
        scalars = {
            "prefill_compile_s": obj.get("prefill_compile_s", 0.0),
            "activate_s": obj.get("activate_s", 0.0),
            "copy_s_per_byte": obj.get("copy_s_per_byte", 0.0),
            "kv_bytes_per_slot": obj.get("kv_bytes_per_slot", 0),
            "background_step_factor": obj.get("background_step_factor", 1.0),
            "background_compile_factor": obj.get("background_compile_factor", 1.0),
            "host_bytes": obj.get("host_bytes", 0),
            "prefill_s.base": prefill.get("base", 0.0),
            "prefill_s.per_token": prefill.get("per_token", 0.0),
        }
        for k, v in scalars.items():
            if not _nonneg(v):
                raise CompileAheadError(f"{where}.{k}: a number >= 0")
        chunk = obj.get("prefill_chunk", 1)
        if not is_chunk(chunk):
            raise CompileAheadError(f"{where}.prefill_chunk: a whole number >= 1")
        kv = obj.get("kv", "copy")
        if kv not in ("copy", "reserve"):
            raise CompileAheadError(f'{where}.kv: "copy" or "reserve"')
        factors = obj.get("background_compile_factors", {})
        if not isinstance(factors, dict) or not all(
            isinstance(k, str) and _nonneg(v) for k, v in factors.items()
        ):
            raise CompileAheadError(
                f'{where}.background_compile_factors: an object of activity ("step:B", '
                '"prefill", "switch", "compile") to numbers >= 0'
            )
        return cls(
            kv=kv,
            prefill_chunk=chunk,
            compile_s=Linear.from_json(obj.get("compile_s", 1.0), f"{where}.compile_s"),
            step_s=Linear.from_json(obj.get("step_s", 0.01), f"{where}.step_s"),
            bucket_bytes=Linear.from_json(obj.get("bucket_bytes", 2**30), f"{where}.bucket_bytes"),
            prefill_base_s=float(scalars["prefill_s.base"]),
            prefill_per_token_s=float(scalars["prefill_s.per_token"]),
            prefill_compile_s=float(scalars["prefill_compile_s"]),
            activate_s=float(scalars["activate_s"]),
            copy_s_per_byte=float(scalars["copy_s_per_byte"]),
            kv_bytes_per_slot=int(scalars["kv_bytes_per_slot"]),
            background_step_factor=max(1.0, float(scalars["background_step_factor"])),
            background_compile_factor=max(1.0, float(scalars["background_compile_factor"])),
            background_compile_factors={k: max(1.0, float(v)) for k, v in factors.items()},
            host_bytes=int(scalars["host_bytes"]),
        )


def read_cost_model(path: str | Path, what: str = "--simulate") -> CostModel:
    """A cost model file, read as every input file is; refused in one line."""
    text = read_input_text(path, f"{what} {path}", MAX_COST_FILE_BYTES)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise CompileAheadError(f"{what} {path}: not JSON (line {err.lineno}: {err.msg})") from None
    return CostModel.from_json(obj, f"{what} {path}")


def _nonneg(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 and v == v


def _no_unknown(obj: dict, known: set[str], where: str) -> None:
    unknown = sorted(set(obj) - known)
    if unknown:
        raise CompileAheadError(f"{where}: unknown key {unknown[0]!r}")


@dataclass
class _Background:
    """A background compile: the seconds it still needs alone, as of ``since``."""

    bucket: Bucket
    start: float
    left_s: float
    since: float
    end: float | None = None  # when it finished, once it has


class SimExecutor:
    """Buckets priced by a CostModel on a VirtualClock (see the module's docstring)."""

    def __init__(self, costs: CostModel) -> None:
        self.costs = costs
        self.clock = VirtualClock()
        self.compiled: set[Bucket] = set()
        self.active: Bucket | None = None
        self._background: _Background | None = None
        self._prefill_compiled = False
        self._peak = costs.host_bytes

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset()

    def bucket_bytes(self, bucket: Bucket) -> int:
        return int(self.costs.bucket_bytes(bucket))

    def _compile_s(self, bucket: Bucket) -> float:
        """The bucket's compile, and the prefill graph's with the first compile."""
        first = not self._prefill_compiled
        self._prefill_compiled = True
        return self.costs.compile_s(bucket) + (self.costs.prefill_compile_s if first else 0.0)

    def compile(self, bucket: Bucket) -> float:
        seconds = self._compile_s(bucket)
        self._busy(seconds, COMPILE)
        self.compiled.add(bucket)
        self._note_memory()
        return seconds

    def start_compile(self, bucket: Bucket) -> None:
        assert self._background is None, "one background compile at a time"
        now = self.clock.now()
        self._background = _Background(bucket, now, self._compile_s(bucket), now)

    def finished_compile(self) -> tuple[Bucket, float] | None:
        b = self._background
        if b is None or b.end is None or b.end > self.clock.now():
            return None
        self._background = None
        self.compiled.add(b.bucket)
        self._note_memory()
        return b.bucket, b.end - b.start

    def wait(self, until_s: float | None) -> None:
        b, now = self._background, self.clock.now()
        ends = [] if until_s is None else [until_s]
        if b is not None:
            ends.append(b.end if b.end is not None else now + b.left_s)
        if ends:
            target = max(min(ends), now)
            self._progress(target, 1.0)  # idle: the compile has the host to itself
            self.clock.jump_to(target)

    def _busy(self, seconds: float, activity: str) -> None:
        """The device works for ``seconds`` at ``activity``; a background compile beside it
        runs slower."""
        now = self.clock.now()
        self._progress(now + max(seconds, 0.0), self.costs.compile_factor(activity))
        self.clock.advance(seconds)

    def _progress(self, until: float, factor: float) -> None:
        """Bring the background compile up to ``until``, run at 1/factor of its own pace."""
        b = self._background
        if b is None or b.end is not None:
            return
        span = until - b.since
        if b.left_s * factor <= span + 1e-9:  # a nanosecond's rounding would never end it
            b.end, b.left_s = b.since + b.left_s * factor, 0.0
        else:
            b.left_s -= span / factor
        b.since = until

    def release(self, bucket: Bucket) -> None:
        self.compiled.discard(bucket)

    def activate(self, bucket: Bucket, moves: Mapping[int, int], lengths: Mapping[int, int]) -> int:
        # with one reservation for every bucket, a row that keeps its index stays where it is
        moved = [r for r, to in moves.items() if self.costs.kv == "copy" or r != to]
        copied = sum(lengths[r] for r in moved) * self.costs.kv_bytes_per_slot
        if self.active is not None:  # both KV allocations coexist during the copy
            kv = self.costs.kv_bytes(self.active) + self.costs.kv_bytes(bucket)
            self._peak = max(self._peak, self._resident() + kv)
        self._busy(self.costs.activate_s + copied * self.costs.copy_s_per_byte, SWITCH)
        self.active = bucket
        self._note_memory()
        return copied

    def prefill_tokens(self, prompt_len: int) -> int:
        return padded(prompt_len, self.costs.prefill_chunk)

    def prefill(self, row: int, prompt: Sequence[int]) -> int:
        tokens = self.prefill_tokens(len(prompt))
        self._busy(self.costs.prefill_s(tokens) * self._slowdown(), PREFILL)
        return self.costs.token

    def step(self, feeds: Mapping[int, tuple[int, int]]) -> dict[int, int]:
        assert self.active is not None
        self._busy(
            self.costs.step_s(self.active) * self._slowdown(), activity_key(self.active.batch)
        )
        return dict.fromkeys(feeds, self.costs.token)

    def _slowdown(self) -> float:
        b = self._background
        running = b is not None and (b.end is None or b.end > self.clock.now())
        return self.costs.background_step_factor if running else 1.0

    def _resident(self) -> int:
        compiling = [self._background.bucket] if self._background is not None else []
        graphs = sum(self.bucket_bytes(b) for b in (*self.compiled, *compiling))
        return self.costs.host_bytes + graphs

    def _note_memory(self) -> None:
        kv = self.costs.kv_bytes(self.active) if self.active is not None else 0
        self._peak = max(self._peak, self._resident() + kv)

    def peak_rss_bytes(self) -> int:
        return self._peak

    def close(self) -> None:
        self._background = None
