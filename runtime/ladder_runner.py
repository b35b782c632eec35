"""Run a protocol on the ladder under one schedule, with accounting and boundary records.

The runner owns the loop; the KV store (kv_store.py) owns memory and the compile jobs
(compile_jobs.py) own compilation. A boundary is where the context no longer fits the active
rung: the next rung is taken (waiting only if its compile is late), the KV grows (copy or
nothing), the new graph is bound, and the retired rung is released where the schedule says so.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compile_ahead.errors import CompileAheadError

from . import graphs
from .accounting import TimeWeighted, now_ns, peak_rss_bytes, reset_peak_rss, rss_bytes
from .compile_jobs import CompiledRung, Faults, OneAhead, RungCompiler
from .compiler import CompileOptions, compile_step
from .events import RunEvents
from .kv_store import GrowingKV, KVStore, ReservedKV, SharedMaxKV
from .ladder import Ladder
from .protocol import Protocol
from .schedules import Schedule
from .sources import ModelSource
from .split_step import WeightParts, compile_attention_core
from .step import prefill_chunks

GRAPH_MODES = ("whole", "split")


# Device -> graph mode measured best for long-context decode (see default_graph).
MEASURED_GRAPH_DEFAULTS = {"CPU": "whole"}


def default_graph(device: str) -> str:
    """The graph mode a run uses when not told, chosen from measurement per device.

    CPU: whole. Measured on qwen2.5-0.5b (benchmarks/split_vs_whole.py, ladder_schedules.py):
    split compiles a successor rung in ~0.06 s instead of ~6.5 s and holds one weight copy
    (0.24x the RSS with four rungs), but a split decode step is 8-11% slower (24 extra
    attention calls). On the seed's full 1K..8K protocol that decides it: i2 finished in
    456 s whole against 490 s split. Split only won short protocols (the 64..512 ladder),
    where whole-graph background compiles take a larger share of the decoding cores.
    Other devices: whole, until a fast small-graph path has been measured there.
    """
    return MEASURED_GRAPH_DEFAULTS.get(device.upper(), "whole")


@dataclass
class RunSettings:
    schedule: Schedule
    ladder: Ladder
    protocol: Protocol
    # 1 (default): prefill token by token on the first rung's decode graph, so no schedule
    # pays a prefill-graph compile; >1: a chunked prefill graph, compiled in the foreground.
    prefill_chunk: int = 1
    boundary_window: int = 3  # steps recorded on each side of a boundary
    keep_logits: bool = False  # keep every step's logits (tests on tiny models)
    counter_every: int = 16  # decode steps between counter samples (RSS, tok/s)
    # "whole": one graph per rung, each with its own compiled weights; "split": weight parts
    # compiled once, a rung is only its weightless attention core (split_graphs.py).
    graph: str = "whole"
    faults: Faults = field(default_factory=Faults)


@dataclass
class RunResult:
    report: dict[str, Any]
    predicted: list[int]  # top-1 after each decode step
    logits: list[np.ndarray]  # every step's logits when keep_logits, else empty
    error: BaseException | None = None
    step_ns: list[int] = field(default_factory=list)  # wall time of decode step i
    step_context: list[int] = field(default_factory=list)  # KV slots filled before step i


def logits_digest(logits: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(logits, np.float32).tobytes()).hexdigest()[:16]


def make_store(
    schedule: Schedule, source: ModelSource, rungs: tuple[int, ...], kv: str, first: int
) -> KVStore:
    cfg = source.config
    if schedule.kv == "shared-max":
        return SharedMaxKV(cfg, rungs, kv)
    if schedule.kv == "reserve-commit":
        return ReservedKV(cfg, rungs, kv)
    return GrowingKV(cfg, rungs, kv, first)


class LadderRunner:
    def __init__(
        self,
        source: ModelSource,
        options: CompileOptions,
        settings: RunSettings,
        events: RunEvents | None = None,
    ):
        self.source = source
        self.options = options.resolved()
        self.settings = settings
        self.events = events or RunEvents()
        self.schedule = settings.schedule
        ladder = settings.ladder
        self.rungs = (ladder.top,) if self.schedule.rungs == "top" else ladder.rungs
        prompt_len = len(settings.protocol.prompt)
        if prompt_len + 1 > ladder.top:
            raise CompileAheadError(
                f"the prompt ({prompt_len} tokens) does not fit the top rung ({ladder.top}) "
                "with room to decode"
            )
        if settings.prefill_chunk <= 0:
            raise CompileAheadError("--prefill-chunk must be positive")
        if settings.graph not in GRAPH_MODES:
            raise CompileAheadError(
                f"--graph must be one of {', '.join(GRAPH_MODES)}, got {settings.graph!r}"
            )
        if settings.graph == "split" and settings.prefill_chunk > 1:
            raise CompileAheadError("--prefill-chunk > 1 is not available with --graph split")
        self.first = self._rung_for(prompt_len + 1)
        kv = self.options.kv_precision
        assert kv is not None
        self.kv_precision = kv
        self.store = make_store(self.schedule, source, self.rungs, kv, self.first)
        self.weight_parts: WeightParts | None = None
        bind_early = self.store.bind_on_compile if self.store.shared_buffer else None
        self.compiler = RungCompiler(
            self._spec_for,
            self._build,
            self.events,
            settings.faults,
            on_ready=bind_early,
            label=lambda spec: "attention" if settings.graph == "split" else spec.kind,
        )

    def _build(self, spec: graphs.GraphSpec):
        if self.weight_parts is not None:
            return compile_attention_core(self.weight_parts, spec, self.options)
        return compile_step(self.source, spec, self.options).step

    def _compile_weight_parts(self) -> None:
        self.weight_parts = WeightParts(self.source, self.options)

    # -- helpers -----------------------------------------------------------------------
    def _rung_for(self, slots: int) -> int:
        return next((r for r in self.rungs if r >= slots), -1)

    def _spec_for(self, capacity: int, chunk: int) -> graphs.GraphSpec:
        top = self.rungs[-1]
        shared = self.store.shared_buffer and capacity < top
        return graphs.GraphSpec(capacity, chunk, self.kv_precision, top if shared else None)

    def _record_window(self, t: int) -> bool:
        w = self.settings.boundary_window
        return any(-w <= t - c < w for c in self.rungs)

    # -- the run -----------------------------------------------------------------------
    def run(self) -> RunResult:
        s = self.settings
        proto = s.protocol
        start = now_ns()
        reset_peak_rss()
        reserved = TimeWeighted(start, self.store.reserved_bytes())
        committed = TimeWeighted(start, 0)
        one_ahead = OneAhead(self.compiler) if self.schedule.compile == "one-ahead" else None
        rung_stats: dict[int, dict[str, float]] = {}
        boundaries: list[dict[str, Any]] = []
        window: list[dict[str, Any]] = []
        predicted: list[int] = []
        step_ns: list[int] = []
        step_context: list[int] = []
        kept: list[np.ndarray] = []
        fg_compile_ns = 0
        decode_ns = 0
        prefill_ns = 0
        stop = "completed"
        error: BaseException | None = None
        active: CompiledRung | None = None
        first_compile_s = 0.0
        weights_compile_s = 0.0
        prefill_compile_s = 0.0

        def account(ts: int) -> None:
            reserved.set(ts, self.store.reserved_bytes())
            committed.set(ts, self.store.committed_bytes())

        try:
            # Foreground: what has to exist before the first token.
            t0 = now_ns()
            if s.graph == "split":
                weights_compile_s = self.compiler.compile_shared(
                    "weights", self._compile_weight_parts
                )
            eager = self.rungs if self.schedule.compile == "eager" else (self.first,)
            for capacity in eager:
                self.compiler.compile(capacity, background=False, length=0)
            active = self.compiler.get(self.first)
            first_compile_s = active.compile_s
            if not self.store.shared_buffer:
                active.step.bind(self.store.arena)
            prefill_step = active.step
            if s.prefill_chunk > 1:
                prefill = self.compiler.compile(self.first, False, 0, s.prefill_chunk)
                prefill_compile_s = prefill.compile_s
                prefill_step = prefill.step
                del prefill
                if not self.store.shared_buffer:
                    prefill_step.bind(self.store.arena)
            fg_compile_ns += now_ns() - t0

            # Prefill the prompt in chunks, then drop the prefill graph before compiling ahead.
            p0 = now_ns()
            logits = prefill_chunks(prefill_step, proto.prompt, self.store.write)
            self.store.length = len(proto.prompt)
            prefill_ns = now_ns() - p0
            self.events.prefill(self.first, len(proto.prompt), p0, p0 + prefill_ns)
            del prefill_step
            self.compiler.release(self.first, s.prefill_chunk)
            if one_ahead is not None:
                self._start_next(one_ahead, self.first, len(proto.prompt))
            account(now_ns())
            last = int(np.argmax(logits))

            for i in range(proto.decode_tokens):
                t = self.store.length
                need = self._rung_for(t + 1)
                if need < 0:
                    stop = f"top rung capacity {self.rungs[-1]} reached"
                    break
                if need != active.capacity:
                    active, fg_ns = self._switch(
                        active, need, t, i, one_ahead, reserved, boundaries
                    )
                    fg_compile_ns += fg_ns
                    account(now_ns())
                token = proto.next_input(i, last)
                a = now_ns()
                out = active.step.run(np.asarray([token], np.int64), t)
                s.faults.after_step()
                out.commit(self.store.write, t, 1)
                self.store.length = t + 1
                b = now_ns()
                decode_ns += b - a
                step_ns.append(b - a)
                step_context.append(t)
                last = int(np.argmax(out.logits))
                predicted.append(last)
                st = rung_stats.setdefault(active.capacity, {"tokens": 0, "decode_ns": 0})
                st["tokens"] += 1
                st["decode_ns"] += b - a
                if s.keep_logits:
                    kept.append(out.logits.copy())
                if self._record_window(t):
                    window.append(self._window_entry(i, t, active.capacity, out.logits))
                account(b)
                self.events.step(i, active.capacity, a, b)
                if (i + 1) % s.counter_every == 0:
                    self._sample_counters(b, st)
        except KeyboardInterrupt:
            stop = "interrupted"
        except Exception as err:  # reported in the run report, then re-raised by the caller
            stop = f"error: {err}"
            error = err
        finally:
            if one_ahead is not None:
                one_ahead.shutdown()
        end = now_ns()
        report = {
            **self.source.describe(),
            "device": self.options.device,
            "inference_precision": self.options.inference_precision,
            "kv_precision": self.kv_precision,
            "schedule": self.schedule.name,
            "graph": s.graph,
            "schedule_title": self.schedule.title,
            "kv_policy": self.store.kind,
            "ladder": list(s.ladder.rungs),
            "rungs_used": list(self.rungs),
            "protocol": proto.name,
            "prompt_len": len(proto.prompt),
            "decode_tokens": proto.decode_tokens,
            "tokens_decoded": len(predicted),
            "context_final": self.store.length,
            "stop_reason": stop,
            "foreground_compile_s": fg_compile_ns / 1e9,
            "first_rung_compile_s": first_compile_s,
            "weights_compile_s": weights_compile_s,
            "prefill_compile_s": prefill_compile_s,
            "background_compile_s": self._background_compile_s(boundaries),
            "prefill_s": prefill_ns / 1e9,
            "decode_s": decode_ns / 1e9,
            "critical_path_s": (end - start) / 1e9,
            "rungs": [
                {
                    "capacity": c,
                    "tokens": int(v["tokens"]),
                    "decode_s": v["decode_ns"] / 1e9,
                    "tok_s": v["tokens"] / (v["decode_ns"] / 1e9) if v["decode_ns"] else None,
                }
                for c, v in sorted(rung_stats.items())
            ],
            "boundaries": boundaries,
            "boundary_tokens": window,
            "kv_reserved_avg_bytes": reserved.average(end),
            "kv_reserved_peak_bytes": int(reserved.peak),
            "kv_committed_avg_bytes": committed.average(end),
            "kv_committed_peak_bytes": int(committed.peak),
            "kv_bytes_definition": (
                "reserved: sizes of the KV allocations held (what a device would pin); "
                "committed: host pages backing written KV slots"
            ),
            "graphs_resident_max": self.compiler.resident_max,
            # Whole graphs each hold a compiled copy of the weights; split rungs share one.
            "weight_copies_resident_max": 1 if s.graph == "split" else self.compiler.resident_max,
            "compiles_in_flight_max": self.compiler.in_flight_max,
            "peak_rss_bytes": peak_rss_bytes(),
        }
        if error is not None:
            report["error"] = f"{type(error).__name__}: {error}"
        return RunResult(report, predicted, kept, error, step_ns, step_context)

    # -- pieces of the run ---------------------------------------------------------------
    def _start_next(self, one_ahead: OneAhead, capacity: int, length: int) -> None:
        i = self.rungs.index(capacity)
        if i + 1 < len(self.rungs):
            one_ahead.start(self.rungs[i + 1], length)

    def _switch(
        self,
        active: CompiledRung,
        capacity: int,
        t: int,
        step_index: int,
        one_ahead: OneAhead | None,
        reserved: TimeWeighted,
        boundaries: list[dict[str, Any]],
    ) -> tuple[CompiledRung, int]:
        """Cross a boundary; appends its record (also when it fails) and returns the new rung
        with the foreground (critical-path) compile time it cost."""
        b0 = now_ns()
        record: dict[str, Any] = {
            "from": active.capacity,
            "to": capacity,
            "at_step": step_index,
            "context": t,
        }
        boundaries.append(record)
        if one_ahead is not None:
            ready = one_ahead.ready(capacity)
            try:
                rung = one_ahead.take(capacity)
            except Exception as err:
                record["compile_error"] = str(err)
                # One foreground retry; a second failure ends the run (report still written).
                try:
                    rung = self.compiler.compile(capacity, background=False, length=t)
                except Exception as err2:
                    record["retry_error"] = str(err2)
                    record["wait_s"] = (now_ns() - b0) / 1e9
                    raise CompileAheadError(
                        f"compiling rung {capacity} failed in the background ({err}) and on "
                        f"the foreground retry ({err2})"
                    ) from err2
                record["retried"] = True
            # Waiting for a late compile (or retrying it) is compile time on the critical path;
            # a successor that was ready at the boundary costs none.
            record["ready"] = ready and "compile_error" not in record
            foreground_ns = 0 if record["ready"] else now_ns() - b0
            record["wait_s"] = foreground_ns / 1e9
            record["decode_left_s"] = (b0 - rung.started_ns) / 1e9
            record["ready_margin_s"] = (b0 - rung.finished_ns) / 1e9
        else:
            rung = self.compiler.get(capacity)
            foreground_ns = 0
            record.update(ready=True, wait_s=0.0, decode_left_s=None, ready_margin_s=None)
        record["compile_s"] = rung.compile_s
        record["compile_started_at_context"] = rung.started_at_length
        m0 = now_ns()
        migration = self.store.grow_to(capacity)
        reserved.bump_peak(migration.peak_reserved_bytes)
        if not self.store.shared_buffer:
            rung.step.bind(self.store.arena)
            self.store.release_retired()
        m1 = now_ns()
        record["migration_s"] = (m1 - m0) / 1e9
        record["bytes_copied"] = migration.bytes_copied
        if self.schedule.release_retired:
            self.compiler.release(active.capacity)
            active = None  # the retired graph must not outlive its release here
        if one_ahead is not None:
            self._start_next(one_ahead, capacity, t)
        record["switch_s"] = (now_ns() - b0) / 1e9
        timed = {**record, "migration_begin_ns": m0, "migration_end_ns": m1}
        self.events.boundary(timed, rung.job, b0, now_ns())
        return rung, foreground_ns

    def _window_entry(self, i: int, t: int, capacity: int, logits: np.ndarray) -> dict[str, Any]:
        top = np.argsort(logits)[::-1][:5]
        return {
            "step": i,
            "context": t,
            "rung": capacity,
            "top1": int(top[0]),
            "top5": [int(x) for x in top],
            "top5_logits": [float(logits[x]) for x in top],
            "logits_digest": logits_digest(logits),
        }

    def _sample_counters(self, ts: int, stats: dict[str, float]) -> None:
        self.events.counters(
            ts,
            {
                "kv_reserved_bytes": self.store.reserved_bytes(),
                "kv_committed_bytes": self.store.committed_bytes(),
                "rss_bytes": rss_bytes(),
                "graphs_resident": len(self.compiler.resident),
                "tokens_per_s": stats["tokens"] / (stats["decode_ns"] / 1e9)
                if stats["decode_ns"]
                else 0.0,
            },
        )

    def _background_compile_s(self, boundaries: list[dict[str, Any]]) -> float:
        return sum(
            b.get("compile_s", 0.0)
            for b in boundaries
            if self.schedule.compile == "one-ahead" and not b.get("retried")
        )


def run_ladder(
    source: ModelSource,
    options: CompileOptions,
    settings: RunSettings,
    events: RunEvents | None = None,
) -> RunResult:
    return LadderRunner(source, options, settings, events).run()
