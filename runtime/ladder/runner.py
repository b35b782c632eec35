"""Run a protocol on the ladder under one schedule: the mechanism, with no policy of its own.

The schedule's rung policy (rung_policy.py) decides when rungs are compiled; the KV store
(kv_store.py) owns memory, the filled length and which buffer a rung reads; the runner steps
the active rung, crosses boundaries, and tells observers (accounting, trace, progress) what
happened. Where and how each rung is compiled is the compile layer's (compile/rung_builder.py).
A boundary is where the context no longer fits the active rung: the policy hands
over the next rung (waiting only if its compile is late), the store grows, and the retired
rung is released where the schedule says so.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compile_ahead.interrupts import deferred, future_result, hold, unhold
from compile_ahead.runtime.base.measure import now_ns, peak_rss_bytes, reset_peak_rss, rss_bytes
from compile_ahead.runtime.compile.result import CompileResult
from compile_ahead.runtime.compile.rung_builder import RungBuilder
from compile_ahead.runtime.compile.settings.modes import DecodeCompile, GraphMode
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.graphs.step import StepOutput
from compile_ahead.runtime.ladder.batch_runner import BatchDecode
from compile_ahead.runtime.ladder.capacities import near_boundary, rung_holding
from compile_ahead.runtime.ladder.compile_jobs import CompiledRung, CompileJob, CompileJobs
from compile_ahead.runtime.ladder.config import RunConfig, SettledRun
from compile_ahead.runtime.ladder.faults import FaultInjector
from compile_ahead.runtime.ladder.kv_store import KVStore, make_store
from compile_ahead.runtime.ladder.memory_check import check_run_fits
from compile_ahead.runtime.ladder.prefill import PrefillPlan, prefill_chunks
from compile_ahead.runtime.ladder.reporting.accounting import RunAccounting
from compile_ahead.runtime.ladder.reporting.events import BoundaryTiming, FanOut, RunEvents
from compile_ahead.runtime.ladder.reporting.report import BoundaryRecord, RunReport
from compile_ahead.runtime.ladder.rung_policy import RungPolicy, RungUnavailable, make_policy
from compile_ahead.runtime.ladder.schedules import CompileTiming
from compile_ahead.runtime.sources.base import ModelSource


@dataclass
class RunResult:
    report: RunReport
    predicted: list[int]  # top-1 after each decode step
    logits: list[np.ndarray]  # every step's logits when keep_logits, else empty
    error: BaseException | None = None
    step_ns: list[int] = field(default_factory=list)  # wall time of decode step i
    step_context: list[int] = field(default_factory=list)  # KV slots filled before step i
    # The prompt's last logits' top-1: greedy generation's first token (None: not reached).
    first_token: int | None = None
    first_logits: np.ndarray | None = None  # the prompt's last logits, when keep_logits
    jobs: list[CompileJob] = field(default_factory=list)  # every compile that finished
    # A batch (batch_runner.py): each sequence's report entry (its tokens, stop reason, ...)
    # and, when keep_logits, the logits of each of its tokens.
    sequences: list[dict[str, Any]] = field(default_factory=list)
    sequence_logits: list[list[np.ndarray]] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        """Neither failed nor interrupted: its outputs may replace earlier ones."""
        return self.error is None and not self.report.interrupted


def logits_digest(logits: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(logits, np.float32).tobytes()).hexdigest()[:16]


class LadderRunner:
    def __init__(self, source: ModelSource, config: SettledRun, events: RunEvents | None = None):
        if not isinstance(config, SettledRun):
            raise TypeError("a run takes a RunConfig settled for its model: for_model()")
        self.source = source
        self.config = config
        self.options = config.options
        self.schedule = config.schedule
        self.ladder, self.protocol = config.ladder, config.protocol
        self.rungs = self.schedule.ladder_rungs(self.ladder.rungs)
        self.faults = FaultInjector(config.faults)
        prompt_len = len(self.protocol.prompt)
        # The compile layer decides where and how each rung is compiled.
        timeout = config.compile_timeout_s
        self.builder = RungBuilder(
            source, self.options, config.graph, config.placement, timeout, config.batch
        )
        self.first = self._rung_for(prompt_len + 1)
        assert self.options.kv_precision is not None
        self.kv_precision = self.options.kv_precision
        self.prefill_plan: PrefillPlan = config.prefill
        self.decode_compile = config.decode_compile
        # The device's compile defaults the decode graphs get (probed once), for the reports.
        self.decode_defaults = self.builder.decode_defaults
        slots = min(prompt_len + self.protocol.decode_tokens, self.rungs[-1])
        self.batch = config.batch  # sequences stepped together (batch_runner.py: B > 1)
        check_run_fits(
            self.schedule.kv, source.config, self.rungs, slots, self.kv_precision, self.batch
        )
        self.accounting = RunAccounting(now_ns(), 0)
        # Every event whole, also to the accounting alone (FanOut: an interrupt waits for it).
        self.events = FanOut(self.accounting, *([events] if events else []))
        self.store: KVStore | None = None
        self.jobs = CompileJobs(
            self._spec_for,
            self._build,
            self.events,
            self.faults,
            self.builder.submit,
            on_ready=self._on_compiled,
            label=self.builder.label,
            cache=self.options.cache,
        )
        self.policy: RungPolicy = make_policy(self.schedule, self.jobs, self.rungs)
        self.boundaries: list[BoundaryRecord] = []
        self.window: list[dict] = []
        self.predicted: list[int] = []
        self.kept: list[np.ndarray] = []
        self.first_token: int | None = None
        self.first_logits: np.ndarray | None = None
        # The rungs compiled while the prompt is prefilled (a prefill graph's runs only).
        self._first_rungs: Future[None] | None = None
        self._prefill_step: Any = None  # the prefill graph's step while the prompt runs
        self._first_token_ns: int | None = None
        self._first_token_compile_ns = 0  # foreground compile before the first token
        self._decode_wait_ns = 0  # after prefill, waiting for the first rung's decode graph
        self._store_wait_ns = 0  # after the protocol, waiting for cache entries to be written
        # B > 1 sequences: their prefill and decode (batch_runner.py)
        self.batch_decode = BatchDecode(self) if self.batch > 1 else None

    # -- the run -----------------------------------------------------------------------
    def run(self, keep_held: bool = False) -> RunResult:
        """Compile what must exist, prefill, decode; the report covers a failed or interrupted
        run too. The run's end is held (interrupts.hold): a signal then is only noted. With
        ``keep_held`` it returns still holding, so that no signal comes between the run and
        its outputs: the caller writes them whole, then ends the hold (release)."""
        start = self._start = now_ns()
        stop, error = "completed", None
        try:
            self._begin(start)
            stop = self._generate()
        except KeyboardInterrupt:
            stop = "interrupted"
        except Exception as err:  # reported in the run report, then re-raised by the caller
            stop, error = f"error: {err}", err
        finally:
            # The run only ends from here: a signal is noted (interrupts.interrupted(), for the
            # caller), never cuts the end or the report short; waits still say so (wait_out).
            hold()
            try:
                self.policy.shutdown()  # a compile still running is abandoned: it stores nothing
                self.builder.shutdown()
                end = now_ns()  # the protocol's end; cache entries still written come after
                self.jobs.finish_stores()
                self._store_wait_ns = now_ns() - end
                report = self._report(start, end, stop, error)
            finally:
                if not keep_held:
                    unhold()
        acct = self.accounting
        sequences, sequence_logits = self.batch_decode.results() if self.batch_decode else ([], [])
        return RunResult(
            report,
            self.predicted,
            self.kept,
            error,
            acct.step_ns,
            acct.step_context,
            self.first_token,
            self.first_logits,
            list(self.jobs.finished),
            sequences,
            sequence_logits,
        )

    def _generate(self) -> str:
        """Prefill, then decode; why the run ended."""
        if self.batch_decode is not None:
            return self.batch_decode.generate()
        proto = self.protocol
        # No name here holds a rung, so a schedule that releases retired rungs frees the
        # first one's graph at its boundary, not when the run ends.
        logits = self._prefill(self._before_decoding())
        last = self.first_token = int(np.argmax(logits))
        if self.config.keep_logits:
            self.first_logits = logits
        if proto.ends(last):  # the prompt's own token ends greedy generation
            return "eos"
        if proto.decode_tokens > 0:
            return self._decode(self._take_first_rung(), last)
        return "completed"

    def _decode(self, active: CompiledRung, last: int) -> str:
        """The protocol's decode steps from the first rung on; why they ended."""
        proto = self.protocol
        self.policy.rung_taken(self.first, self._kv.length)
        for i in range(proto.decode_tokens):
            need = self._rung_for(self._kv.length + 1)
            if need < 0:
                return self._top_reached()
            if need != active.capacity:
                active = self._switch(active, need, i)
            with deferred():  # a step whole: an interrupt ends the run after it
                out = self._step(active, i, proto.next_input(i, last))
            last = int(np.argmax(out.logits))
            if proto.ends(last):
                return "eos"
        return "completed"

    # -- pieces of the run ---------------------------------------------------------------
    @property
    def _kv(self) -> KVStore:
        """The run's KV store, which _before_decoding makes before anything runs on it."""
        assert self.store is not None, "the KV store is made before any compile"
        return self.store

    def _begin(self, start: int) -> None:
        if self.options.cache is not None:
            self.options.cache.begin_writes(self.config.faults.store_delay_s)
        reset_peak_rss()
        self.accounting.restart(start)
        self.events.run_started(
            {
                "model_label": self.source.label,
                **self.source.describe(),
                "schedule": self.schedule.name,
                "ladder": str(self.ladder),
                "graph": self.config.graph,
                "device": self.options.device,
                "ov_config": self.options.extra_config,
                "decode_defaults": self.decode_defaults,
                **({"batch": self.batch} if self.batch > 1 else {}),
            }
        )

    def _before_decoding(self) -> CompiledRung | None:
        """Reserve the KV and compile what has to exist before the first token (foreground).

        With a prefill graph that is the prefill graph only: the rungs the schedule compiles
        before decoding (the first rung's decode graph at least) compile in the background
        while the prompt is prefilled; None is returned then and _prefill takes the rung.
        """
        t0 = now_ns()
        try:
            self.store = make_store(
                self.schedule.kv,
                self.source.config,
                self.rungs,
                self.kv_precision,
                self.first,
                self.batch,
            )
            self._memory(self._start)  # the reservation is the run's first act
            if self.builder.shares_weights:
                self.jobs.compile_shared("weights", self.builder.prepare)
            if self.prefill_plan.uses_graph:
                if self.decode_compile == DecodeCompile.WITH_PREFILL_GRAPH:
                    self._compile_first_rungs()
                self._prefill_step = self.jobs.compile(
                    self.first, False, 0, self.prefill_plan.chunk
                ).step
                if self.batch == 1:  # a batch binds it to each sequence's row in turn
                    self.store.take_into_use(self._prefill_step)
                if self.decode_compile == DecodeCompile.DURING_PREFILL:
                    self._compile_first_rungs()
                return None
            self.policy.before_decoding(self.first)
            active = self.jobs.get(self.first)
            self.store.take_into_use(active.step)
            return active
        finally:
            end = now_ns()
            self.events.foreground(t0, end)
            self._first_token_compile_ns += end - t0

    def _compile_first_rungs(self) -> None:
        """Start the rungs the schedule compiles before decoding on a thread of the run's
        placement."""
        self._first_rungs = self.builder.submit(
            lambda: self.policy.before_decoding(self.first, background=True), "first-rungs"
        )

    def _prefill(self, active: CompiledRung | None) -> np.ndarray:
        """The prompt, in chunks on the prefill graph (dropped afterwards) while the first
        rung compiles, or token by token on the first rung's decode graph; returns the
        prompt's last logits."""
        prompt = self.protocol.prompt
        assert self.store is not None
        step = active.step if active is not None else self._prefill_step
        p0 = now_ns()
        logits = prefill_chunks(step, prompt, self.store)
        p1 = self._first_token_ns = now_ns()
        self.events.prefill(self.first, len(prompt), p0, p1)
        self.jobs.store_entries()  # what was compiled for the first token, off its path
        if active is None:
            self.jobs.release(self.first, self.prefill_plan.chunk)
            self._prefill_step = None
        else:
            self._memory(now_ns())
        return logits

    def _take_first_rung(self) -> CompiledRung:
        """The first rung, taken into use: the one prefill ran on, or after a prefill graph,
        waiting for its compile (started beside or during the prefill) or compiling it now
        (after the first token)."""
        if not self.prefill_plan.uses_graph:  # prefilled on it: in use already
            return self.jobs.get(self.first)
        assert self.store is not None and self._first_token_ns is not None
        try:
            if self._first_rungs is not None:  # the rungs compiled during prefill
                future_result(self._first_rungs)
            else:
                self.policy.before_decoding(self.first)  # after the first token
        finally:
            waited = now_ns()
            self._decode_wait_ns = waited - self._first_token_ns
            self.events.foreground(self._first_token_ns, waited)
        self.jobs.store_entries()
        active = self.jobs.get(self.first)
        self.store.take_into_use(active.step)
        self._memory(now_ns())
        return active

    def _step(self, active: CompiledRung, i: int, token: int) -> StepOutput:
        t = self._kv.length
        a = now_ns()
        out = active.step.run(np.asarray([token], np.int64), t)
        self.faults.after_step()
        self._kv.append(out, 1)
        b = now_ns()
        self.predicted.append(int(np.argmax(out.logits)))
        if self.config.keep_logits:
            self.kept.append(out.logits.copy())
        if self._record_window(t):
            self.window.append(self._window_entry(i, t, active.capacity, out.logits))
        self._memory(b)
        self.events.step(i, active.capacity, a, b)
        if (i + 1) % self.config.counter_every == 0:
            self._sample_counters(b, active.capacity)
        return out

    def _switch(self, active: CompiledRung, capacity: int, step_index: int) -> CompiledRung:
        """Cross a boundary; its record is kept also when it fails."""
        b0 = now_ns()
        t = self._kv.length
        record = BoundaryRecord(active.capacity, capacity, step_index, t)
        self.boundaries.append(record)
        taken = None
        try:
            taken = self.policy.take(capacity, t)
        except RungUnavailable as err:
            record.compile_error, record.retry_error = err.compile_error, err.retry_error
            raise
        finally:
            # Waiting for a late compile (or retrying it) is compile time on the critical
            # path; a successor that was ready, or compiled before decoding, costs none.
            waited = now_ns()
            record.ready = taken is not None and taken.ready
            record.wait_s = 0.0 if record.ready else (waited - b0) / 1e9
            if not record.ready:
                self.events.foreground(b0, waited)
        rung = taken.rung
        record.retried, record.compile_error = taken.retried, taken.compile_error
        if self.schedule.compile is CompileTiming.ONE_AHEAD:
            record.decode_left_s = (b0 - rung.started_ns) / 1e9
            record.ready_margin_s = (b0 - rung.finished_ns) / 1e9
        record.compile_s = rung.compile_s
        record.compile_started_at_context = rung.started_at_length
        record.cache, record.import_s = rung.cache.state, rung.cache.import_s
        m0 = now_ns()
        migration = self._kv.grow_to(capacity)
        self._kv.take_into_use(rung.step)
        m1 = now_ns()
        record.migration_s = (m1 - m0) / 1e9
        record.allocation_s, record.copy_s = migration.allocation_s, migration.copy_s
        record.bytes_copied = migration.bytes_copied
        if self.schedule.release_retired:
            self.jobs.release(active.capacity)
        self.policy.rung_taken(capacity, t)
        end = now_ns()
        record.switch_s = (end - b0) / 1e9
        timing = BoundaryTiming(record, b0, end, m0, m1, migration.peak_reserved_bytes)
        self.events.boundary(timing, rung.job)
        self._memory(end)
        self.jobs.store_entries()  # a rung compiled in the foreground here
        return rung

    # -- helpers -----------------------------------------------------------------------
    def _on_compiled(self, step: Any) -> None:
        """A graph compiled: bound to a shared KV buffer now, off the critical path, when it
        takes the store's batch (a batch's prefill graph takes one sequence's row)."""
        if self.store is not None and step.spec.batch == self.batch:
            self.store.on_compiled(step)

    def _top_reached(self) -> str:
        top = self.rungs[-1]
        if top >= self.source.config.max_position_embeddings:
            return f"the model's maximum context ({top}, max_position_embeddings) reached"
        return f"top rung capacity {top} reached"

    def _build(self, spec: GraphSpec, background: bool) -> CompileResult:
        fault = self.faults.take_worker_fault(spec.capacity) if background else None
        return self.builder.build(spec, background, fault)  # type: ignore[arg-type]

    def _rung_for(self, slots: int) -> int:
        rung = rung_holding(self.rungs, slots)
        return -1 if rung is None else rung

    def _spec_for(self, capacity: int, chunk: int) -> GraphSpec:
        assert self.store is not None, "the KV store is made before any compile"
        buffer = self.store.buffer_capacity(capacity)
        if chunk > 1:  # the prompt's prefill graph
            return self.prefill_plan.spec(capacity, self.kv_precision, buffer)
        return GraphSpec(capacity, chunk, self.kv_precision, buffer, batch=self.batch)

    def _memory(self, ts: int) -> None:
        if self.store is not None:
            self.events.memory(ts, self.store.reserved_bytes(), self.store.committed_bytes())

    def _record_window(self, t: int) -> bool:
        return near_boundary(self.rungs, t, self.config.boundary_window)

    def _window_entry(self, i: int, t: int, capacity: int, logits: np.ndarray) -> dict:
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

    def _sample_counters(self, ts: int, capacity: int) -> None:
        assert self.store is not None
        self.events.counters(
            ts,
            {
                "kv_reserved_bytes": self.store.reserved_bytes(),
                "kv_committed_bytes": self.store.committed_bytes(),
                "rss_bytes": rss_bytes(),
                "tokens_per_s": self.accounting.rate(capacity),
            },
        )

    def _report(self, start: int, end: int, stop: str, error: BaseException | None) -> RunReport:
        if self.batch_decode is None:
            return self._ladder_report(start, end, stop, error)
        self._first_token_ns = self.batch_decode.first_token_ns()  # the batch's first
        report = self._ladder_report(start, end, stop, error)
        started = self.config.started_ns
        command = min(started, start) if started is not None else start
        self.batch_decode.amend(report, command, self.accounting.step_ns)
        return report

    def _ladder_report(
        self, start: int, end: int, stop: str, error: BaseException | None
    ) -> RunReport:
        s, acct, store = self.config, self.accounting, self.store
        cache = self.options.cache
        jobs = self.jobs.finished
        first = next((j for j in jobs if j.capacity == self.first and j.chunk == 1), None)
        ft = self._first_token_ns
        command = min(s.started_ns, start) if s.started_ns is not None else start
        return RunReport(
            model=self.source.describe(),
            device=self.options.device,
            inference_precision=self.options.inference_precision,
            ov_config=dict(self.options.extra_config),
            decode_defaults=self.decode_defaults,
            kv_precision=self.kv_precision,
            schedule=self.schedule.name,
            schedule_title=self.schedule.title,
            graph=s.graph,
            placement=s.placement,
            kv_policy=self.schedule.kv.value,
            ladder=list(s.ladder.rungs),
            rungs_used=list(self.rungs),
            protocol=s.protocol.name,
            prompt_len=len(s.protocol.prompt),
            decode_tokens=s.protocol.decode_tokens,
            tokens_decoded=len(self.predicted),
            context_final=store.length if store else 0,
            stop_reason=stop,
            foreground_compile_s=acct.foreground_ns / 1e9,
            first_rung_compile_s=first.seconds if first else 0.0,
            weights_compile_s=sum(j.seconds for j in jobs if j.capacity == 0),
            prefill_compile_s=sum(j.seconds for j in jobs if j.chunk > 1),
            background_compile_s=sum(j.seconds for j in jobs if j.background),
            prefill_s=acct.prefill_ns / 1e9,
            decode_s=acct.decode_ns / 1e9,
            critical_path_s=(end - start) / 1e9,
            first_token_s=None if ft is None else (ft - command) / 1e9,
            startup_s=(start - command) / 1e9,
            first_token_compile_s=self._first_token_compile_ns / 1e9,
            prefill=self.prefill_plan.to_json()
            | ({"decode_compile": self.decode_compile} if self.prefill_plan.uses_graph else {}),
            decode_graph_wait_s=self._decode_wait_ns / 1e9,
            rungs=[acct.rungs[c] for c in sorted(acct.rungs)],
            boundaries=self.boundaries,
            boundary_tokens=self.window,
            kv_reserved_avg_bytes=acct.reserved.average(end),
            kv_reserved_peak_bytes=int(acct.reserved.peak),
            kv_committed_avg_bytes=acct.committed.average(end),
            kv_committed_peak_bytes=int(acct.committed.peak),
            graphs_resident_max=self.jobs.resident_max,
            # Whole graphs each hold a compiled copy of the weights; split rungs share one.
            weight_copies_resident_max=1 if s.graph is GraphMode.SPLIT else self.jobs.resident_max,
            compiles_in_flight_max=self.jobs.in_flight_max,
            compile_jobs=[j.to_json() for j in jobs],
            compile_cache_dir=str(cache.directory) if cache is not None else None,
            cache_store_wait_s=self._store_wait_ns / 1e9,
            peak_rss_bytes=peak_rss_bytes(),
            error=f"{type(error).__name__}: {error}" if error is not None else None,
        )


def run_ladder(
    source: ModelSource,
    config: RunConfig | SettledRun,
    events: RunEvents | None = None,
    keep_held: bool = False,
) -> RunResult:
    """One run of ``config`` (settled for ``source`` here unless it already is)."""
    settled = config if isinstance(config, SettledRun) else config.for_model(source)
    return LadderRunner(source, settled, events).run(keep_held)
