"""What a ladder run reports: typed records, their JSON form, and one summary formatter.

The JSON keys are the report's public format (docs/usage/running.md, "The run report");
`ab schedule` reads the boundaries of reports written by other processes back with
BoundaryRecord.from_json.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from compile_ahead.output.format_version import stamped
from compile_ahead.runtime.ladder.reporting.batch import BatchStats
from compile_ahead.runtime.ladder.reporting.perplexity import TextScore

if TYPE_CHECKING:
    from compile_ahead.runtime.ladder.compile_jobs import CompiledRung
    from compile_ahead.runtime.ladder.kv_store import Migration

MIB = 2**20
# How the summary names each --decode-compile timing (modes.DecodeCompile).
DECODE_COMPILE_WORDS = {
    "with-prefill-graph": "beside the prefill graph's compile",
    "during-prefill": "during prefill",
    "after-prefill": "after prefill",
}

KV_BYTES_DEFINITION = (
    "reserved: sizes of the KV allocations held (what a device would pin); "
    "committed: host pages backing written KV slots"
)


@dataclass
class BoundaryRecord:
    """One switch to the next rung."""

    from_rung: int
    to: int
    at_step: int
    context: int
    ready: bool | None = None  # successor compiled before the boundary (eager: True)
    wait_s: float | None = None  # critical-path time waiting for (or retrying) the compile
    decode_left_s: float | None = None  # decode time from the compile's start to the boundary
    ready_margin_s: float | None = None  # boundary time minus the compile's end
    compile_s: float | None = None
    compile_started_at_context: int | None = None
    cache: str | None = None  # the successor's compile cache: hit (imported), miss or off
    import_s: float | None = None  # importing it from the cache (hit)
    migration_s: float | None = None  # growing the KV (allocation, copy) and rebinding
    allocation_s: float | None = None  # of which the new KV allocation
    copy_s: float | None = None  # of which copying the live slots (every sequence's)
    bytes_copied: int | None = None
    switch_s: float | None = None
    compile_error: str | None = None  # the background compile's failure
    retry_error: str | None = None  # the foreground retry's failure (the run stopped)
    retried: bool = False

    def successor(self, rung: CompiledRung, at_ns: int, one_ahead: bool) -> None:
        """What the rung taken at ``at_ns`` tells of its compile (a one-ahead schedule's also
        how much decoding it overlapped and how early it was ready)."""
        if one_ahead:
            self.decode_left_s = (at_ns - rung.started_ns) / 1e9
            self.ready_margin_s = (at_ns - rung.finished_ns) / 1e9
        self.compile_s = rung.compile_s
        self.compile_started_at_context = rung.started_at_length
        self.cache, self.import_s = rung.cache.state, rung.cache.import_s

    def migrated(self, took_ns: int, migration: Migration) -> None:
        """The KV's move to the new rung: ``took_ns`` in all, the store's own parts."""
        self.migration_s = took_ns / 1e9
        self.allocation_s, self.copy_s = migration.allocation_s, migration.copy_s
        self.bytes_copied = migration.bytes_copied

    def to_json(self) -> dict[str, Any]:
        fields_ = asdict(self)
        out = {"from": fields_.pop("from_rung"), **fields_}
        for optional in ("compile_error", "retry_error"):
            if out[optional] is None:
                del out[optional]
        if not out["retried"]:
            del out["retried"]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BoundaryRecord:
        """A record read back; a report from another tool may leave out where it happened."""
        known = {f.name for f in fields(cls)} - {"from_rung", "at_step", "context"}
        values = {k: v for k, v in data.items() if k in known}
        where = {"at_step": data.get("at_step", -1), "context": data.get("context", -1)}
        return cls(from_rung=data["from"], **where, **values)

    @property
    def failed(self) -> bool:
        return self.retry_error is not None


@dataclass
class RungStats:
    capacity: int
    tokens: int
    decode_s: float

    @property
    def tok_s(self) -> float | None:
        return self.tokens / self.decode_s if self.decode_s else None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "tok_s": self.tok_s}


@dataclass
class RunReport:
    """A run of one schedule on the ladder (ours, or an upstream pipeline in the same shape)."""

    model: dict[str, Any]  # the source's describe(): model, synthetic, origin, ...
    device: str
    schedule: str
    schedule_title: str
    ladder: list[int]
    prompt_len: int
    decode_tokens: int
    stop_reason: str = "completed"
    inference_precision: str | None = None
    kv_precision: str | None = None
    ov_config: dict[str, str] = field(default_factory=dict)  # the user's compile properties
    # The device's properties for decode graphs beside the user's (device_defaults.py).
    decode_defaults: dict[str, str] = field(default_factory=dict)
    graph: str | None = None
    # Where one-ahead compiles ran: in-process (a background thread) or worker (a process).
    placement: str | None = None
    kv_policy: str | None = None
    rungs_used: list[int] = field(default_factory=list)
    protocol: str | None = None
    tokens_decoded: int = 0
    context_final: int = 0
    foreground_compile_s: float = 0.0
    first_rung_compile_s: float = 0.0
    weights_compile_s: float = 0.0
    prefill_compile_s: float = 0.0
    background_compile_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    critical_path_s: float = 0.0
    # The command's start to the first generated token (the prompt's last logits), and its
    # parts: startup (model resolved, arguments), compile or import on the way (the prefill
    # graph, or the first rung's decode graph when prefilling token by token), prefill_s.
    first_token_s: float | None = None
    startup_s: float = 0.0
    first_token_compile_s: float = 0.0
    # How the prompt was prefilled (path, chunk, chosen_by; with a prefill graph also when the
    # first rungs compiled: decode_compile) and how long decoding waited after prefill for
    # them (compiled during prefill, or after it).
    prefill: dict[str, Any] = field(default_factory=dict)
    decode_graph_wait_s: float = 0.0
    rungs: list[RungStats] = field(default_factory=list)
    boundaries: list[BoundaryRecord] = field(default_factory=list)
    boundary_tokens: list[dict[str, Any]] = field(default_factory=list)
    kv_reserved_avg_bytes: float | None = None
    kv_reserved_peak_bytes: int | None = None
    kv_committed_avg_bytes: float | None = None
    kv_committed_peak_bytes: int | None = None
    kv_bytes_definition: str = KV_BYTES_DEFINITION
    graphs_resident_max: int = 0
    weight_copies_resident_max: int | None = None
    compiles_in_flight_max: int = 0
    # Every compile of the run: job, capacity (0: split weight parts), chunk, background,
    # seconds, ok, cache (hit: imported from the compile cache; miss; off), import_s.
    compile_jobs: list[dict[str, Any]] = field(default_factory=list)
    compile_cache_dir: str | None = None  # None: no compile cache
    # Cache entries of foreground compiles are written after the token they were compiled
    # for, on a helper thread; what was still being written when the protocol ended is
    # waited for after it (not part of critical_path_s).
    cache_store_wait_s: float = 0.0
    peak_rss_bytes: int = 0
    error: str | None = None
    # B > 1 sequences: each one's tokens and stop, the batch's rate and step time (batch.py);
    # None at B = 1, whose report is the format it always was.
    batch: BatchStats | None = None
    # A greedy batch-1 run's one sequence, as a batch lists each of its own (batch.py's
    # SequenceReport fields); None otherwise.
    sequences: list[dict[str, Any]] | None = None
    # A greedy run's generated text per sequence, when the model's tokenizer is known.
    texts: list[str] | None = None
    text_score: TextScore | None = None  # teacher-forced text (--text): its NLL and perplexity
    extra: dict[str, Any] = field(default_factory=dict)  # source-specific fields, kept as is

    @property
    def synthetic(self) -> bool | None:
        return self.model.get("synthetic")

    @property
    def interrupted(self) -> bool:
        return self.stop_reason == "interrupted"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = stamped(self.model)
        for f in fields(self):
            if f.name in ("model", "extra", "batch", "sequences", "texts", "text_score"):
                continue
            value = getattr(self, f.name)
            if f.name == "rungs":
                value = [r.to_json() for r in value]
            elif f.name == "boundaries":
                value = [b.to_json() for b in value]
            elif f.name == "error" and value is None:
                continue
            out[f.name] = value
        if self.batch is not None:
            out.update(self.batch.to_json())
        elif self.sequences is not None:
            out["sequences"] = [dict(s) for s in self.sequences]
        if self.texts is not None:
            for entry, text in zip(out["sequences"], self.texts, strict=True):
                entry["text"] = text
        if self.text_score is not None:
            out["text_score"] = self.text_score.to_json()
        out.update(self.extra)
        return out

    def generated(self) -> list[list[int]] | None:
        """A greedy run's generated ids per sequence (None: not a greedy run)."""
        if self.protocol != "greedy":
            return None
        if self.batch is not None:
            return [s.tokens for s in self.batch.sequences]
        return [list(s["tokens"]) for s in self.sequences or []]

    def summary(self) -> str:
        """The console summary of a run (a failed or interrupted one too)."""
        kinds = {True: "SYNTHETIC weights", False: "real weights", None: "weights ?"}
        kind = kinds.get(self.synthetic, "weights ?")
        weights = self.model.get("weight_format", "as in the checkpoint")
        lines = [
            f"model {self.model.get('model')} [{kind}] on {self.device}, weights {weights}, "
            f"KV {self.kv_precision}" + "".join(f", {k}={v}" for k, v in self.ov_config.items()),
            f"schedule {self.schedule} ({self.schedule_title}), ladder {self.ladder}, "
            f"{self.graph} graphs"
            + "".join(
                f", decode {k}={v} (device default)" for k, v in self.decode_defaults.items()
            ),
            f"stop: {self.stop_reason} after {self.tokens_decoded} decode tokens",
            f"foreground compile {self.foreground_compile_s:.2f} s, background compile "
            f"{self.background_compile_s:.2f} s, critical path {self.critical_path_s:.2f} s, "
            f"decode {self.decode_s:.2f} s",
        ]
        if self.first_token_s is not None:
            lines.append(self._first_token_line())
        for r in self.rungs:
            rate = f"{r.tok_s:.2f} tok/s" if r.tok_s else "-"
            lines.append(f"  rung {r.capacity:>6}: {r.tokens:>6} tokens, {rate}")
        lines += [_boundary_line(b) for b in self.boundaries]
        lines += [_retry_line(b) for b in self.boundaries if b.retried]
        if self.compile_cache_dir is not None:
            lines += _cache_lines(self.compile_cache_dir, self.compile_jobs)
            if self.cache_store_wait_s >= 0.01:
                lines.append(
                    f"  entries still being written when decoding ended: "
                    f"{self.cache_store_wait_s:.2f} s more"
                )
        lines.append(
            f"KV reserved avg {_mib(self.kv_reserved_avg_bytes)} MiB "
            f"(peak {_mib(self.kv_reserved_peak_bytes)}), committed avg "
            f"{_mib(self.kv_committed_avg_bytes)} MiB (peak "
            f"{_mib(self.kv_committed_peak_bytes)}); graphs resident max "
            f"{self.graphs_resident_max}; peak RSS {_mib(self.peak_rss_bytes, 0)} MiB"
        )
        lines += self.batch.lines() if self.batch is not None else []
        lines += self.text_score.lines() if self.text_score is not None else []
        if self.error:
            lines.append(f"error: {self.error}")
        return "\n".join(lines)

    def _first_token_line(self) -> str:
        plan = self.prefill
        how = plan.get("path", "?")
        if plan.get("chunk", 1) > 1:
            how += f", {plan['chunk']} tokens per call"
        line = (
            f"first token {self.first_token_s:.2f} s from the command's start (startup "
            f"{self.startup_s:.2f} s, compile/import {self.first_token_compile_s:.2f} s, prefill "
            f"{self.prefill_s:.2f} s of {_prefilled(plan, self.prompt_len)}: {how})"
        )
        if plan.get("chunk", 1) > 1:
            when = DECODE_COMPILE_WORDS[plan.get("decode_compile", "during-prefill")]
            line += (
                f"; the first rung compiled {when}, decode waited "
                f"{self.decode_graph_wait_s:.2f} s for it"
            )
        return line


def _cache_lines(directory: str, jobs: list[dict[str, Any]]) -> list[str]:
    """The compile cache's part of the summary: counts, then what became of each graph."""
    done = [j for j in jobs if j.get("ok", True)]
    hits = sum(1 for j in done if j.get("cache") == "hit")
    stored = sum(1 for j in done if j.get("cache") == "miss" and j.get("cache_stored"))
    unstored = sum(1 for j in done if j.get("cache") == "miss" and not j.get("cache_stored"))
    off = sum(1 for j in done if j.get("cache") == "off")
    counts = [f"{hits} imported", f"{stored} compiled and stored"]
    if unstored:
        counts.append(f"{unstored} compiled, not stored")
    if off:
        counts.append(f"{off} compiled without the cache")
    lines = [f"compile cache {directory}: {', '.join(counts)}"]
    for j in jobs:
        if j["capacity"] == 0:
            what = "weight parts"
        elif j.get("chunk", 1) > 1:
            what = f"prefill {j['capacity']}x{j['chunk']}"
        else:
            what = f"rung {j['capacity']}"
        note = j.get("cache_note")
        if not j.get("ok", True):
            state = "compile failed"
        elif j.get("cache") == "hit":
            seconds = f"import {j.get('import_s', 0.0):.2f} s"
            state = f"hit ({seconds}, checksum {j.get('verify_s', 0.0):.2f} s)"
        elif j.get("cache") == "miss":
            kept = "miss, stored" + (f" ({note})" if note else "")
            state = kept if j.get("cache_stored") else f"miss, {note or 'not stored'}"
        else:
            state = f"off ({note})" if note else "off"
        lines.append(f"  {what}: {state}")
    return lines


def _mib(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value / MIB:.{digits}f}"


def _seconds(value: float | None, unit_digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{unit_digits}f} s"


def _retry_line(b: BoundaryRecord) -> str:
    """A successor whose background compile failed (e.g. a crashed compile worker) and was
    compiled again in the foreground: said on the console, not only in the JSON report."""
    return (
        f"  boundary {b.from_rung}->{b.to}: the background compile failed ({b.compile_error}); "
        "compiled again in the foreground"
    )


def _boundary_line(b: BoundaryRecord) -> str:
    head = f"  boundary {b.from_rung}->{b.to}:"
    if b.failed:
        return f"{head} FAILED ({b.retry_error})"
    if b.compile_s is None:  # interrupted or failed before the successor was in hand
        return f"{head} not crossed (waited {_seconds(b.wait_s, 3)})"
    migration = "-" if b.migration_s is None else f"{b.migration_s * 1e3:.1f} ms"
    if b.copy_s:  # a copy-and-grow boundary: its allocation and copy within the migration
        migration += f" (allocation {(b.allocation_s or 0) * 1e3:.1f}, copy {b.copy_s * 1e3:.1f})"
    how = f" (cache hit: import {b.import_s:.2f} s)" if b.cache == "hit" else ""
    return (
        f"{head} compile {b.compile_s:.2f} s{how}, margin {_seconds(b.ready_margin_s)}, "
        f"wait {_seconds(b.wait_s, 3)}, migration {migration}, {b.bytes_copied} B copied"
    )


def _prefilled(plan: dict[str, Any], prompt_len: int) -> str:
    """What the prefill time covers: one prompt's tokens, or a batch's prompts and theirs."""
    sequences = plan.get("sequences")
    if not sequences:
        return f"{prompt_len} tokens"
    tokens = sum(s["prompt_len"] for s in sequences)
    return f"{len(sequences)} prompts, {tokens} tokens"
