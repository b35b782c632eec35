"""Run B >= 1 sequences on the ladder under one schedule: the mechanism, with no policy of its
own. B = 1 is a batch of one, stepped as any batch is.

The schedule's rung policy (rung_policy.py) decides when rungs are compiled; the KV store
(kv_store.py) owns memory, the filled length and which buffer a rung reads; the runner steps
the active rung, crosses boundaries, and tells observers (accounting, trace, progress) what
happened. Where and how each rung is compiled is the compile layer's (compile/rung_builder.py).
A boundary is where the longest live sequence's next slot no longer fits the active rung: the
policy hands over the next rung (waiting only if its compile is late), the store grows, and the
retired rung is released where the schedule says so.

Prefill follows the run's plan: with a prefill graph, each sequence's prompt runs on that
batch-1 graph in turn, its K/V written into its own row of the store, its last logits giving
its first token; token by token (chunk 1), steps feed every sequence in its prompt its next
prompt token, through the first rung's decode graph. Either way ragged prompts need no
padding. Steps while every live sequence is still in its prompt are the prefill; from the first
step that gives a sequence a token on, steps are decode steps. Each sequence stops on its own
(sequence.py); the run ends when every sequence has stopped.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import numpy as np

from compile_ahead.interrupts import deferred, future_result, hold, unhold
from compile_ahead.runtime.base.measure import now_ns, reset_peak_rss, rss_bytes
from compile_ahead.runtime.compile.graph.result import CompileResult
from compile_ahead.runtime.compile.rung_builder import RungBuilder
from compile_ahead.runtime.compile.settings.modes import DecodeCompile
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.ladder.compile_jobs import CompiledRung, CompileJobs
from compile_ahead.runtime.ladder.faults import FaultInjector
from compile_ahead.runtime.ladder.kv_store import KVStore, make_store
from compile_ahead.runtime.ladder.prefill import prefill_chunks
from compile_ahead.runtime.ladder.reporting.accounting import RunAccounting
from compile_ahead.runtime.ladder.reporting.events import BoundaryTiming, FanOut, RunEvents
from compile_ahead.runtime.ladder.reporting.report import BoundaryRecord
from compile_ahead.runtime.ladder.reporting.run_report import (
    RunResult,
    RunTimings,
    assemble_report,
    window_entry,
)
from compile_ahead.runtime.ladder.rung_policy import RungPolicy, RungUnavailable, make_policy
from compile_ahead.runtime.ladder.sequence import Sequences, SequenceState
from compile_ahead.runtime.ladder.settings.capacities import near_boundary, rung_holding
from compile_ahead.runtime.ladder.settings.config import RunConfig, SettledRun
from compile_ahead.runtime.ladder.settings.memory_check import check_run_fits
from compile_ahead.runtime.ladder.settings.prefill_plan import PrefillPlan
from compile_ahead.runtime.ladder.settings.schedules import CompileTiming
from compile_ahead.runtime.sources.base import ModelSource

MEMORY_SAMPLES = 64  # KV memory samples while a batch's prompts are prefilled


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
        self.batch = config.batch  # sequences stepped together
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
        self.window_logits: list[np.ndarray] = []
        # Windows around the schedule's rungs, or with keep_window_logits the whole ladder's.
        self.window_rungs = self.ladder.rungs if config.keep_window_logits else self.rungs
        # The rungs compiled while the prompt is prefilled (a prefill graph's runs only).
        self._first_rungs: Future[None] | None = None
        self._prefill_step: Any = None  # the prefill graph's step while the prompt runs
        self.timings = RunTimings()
        self.sequences = Sequences(config.sequences)

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
                self.timings.store_wait_ns = now_ns() - end
                report = assemble_report(self, start, end, stop, error)
            finally:
                if not keep_held:
                    unhold()
        acct = self.accounting
        first = self.sequences.each[0]
        kept = first.logits if self.config.keep_logits else []
        return RunResult(
            report,
            first.tokens[1:],
            kept[1:],
            error,
            acct.step_ns,
            acct.step_context,
            first.tokens[0] if first.tokens else None,
            kept[0] if kept else None,
            list(self.jobs.finished),
            [s.to_json(0) for s in self.sequences],
            [s.logits for s in self.sequences],
            self.window_logits,
        )

    def _generate(self) -> str:
        """Every sequence from its prompt to its stop; why the run ended. No name here holds
        a rung, so a schedule that releases retired rungs frees the first one's graph at its
        boundary, not when the run ends."""
        self._prefill(self._before_decoding())
        if self.sequences.live().any():
            self._decode(self._take_first_rung())
        return self.sequences.run_stop()

    def _prefill(self, active: CompiledRung | None) -> None:
        """Every prompt: on the prefill graph (``active`` None: _before_decoding compiled
        one), else token by token through the first rung's decode graph, ``active``."""
        if active is None:
            self._prefill_each()
        else:
            self._prefill_steps(active)

    def _decode(self, active: CompiledRung) -> None:
        """Steps until every sequence has stopped, crossing boundaries as the longest live
        sequence needs them."""
        self.policy.rung_taken(self.first, self._kv.length)
        step = 0
        while (live := self.sequences.live()).any():
            need = self._rung_for(int(self._kv.lengths[live].max()) + 1)
            if need < 0:
                self._stop_longest()
                continue
            if need > active.capacity:
                active = self._switch(active, need, step)
            with deferred():  # a step whole: an interrupt ends the run after it
                self._step(active, step, live)
            step += 1

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
            self.timings.first_token_compile_ns += end - t0

    def _compile_first_rungs(self) -> None:
        """Start the rungs the schedule compiles before decoding on a thread of the run's
        placement."""
        self._first_rungs = self.builder.submit(
            lambda: self.policy.before_decoding(self.first, background=True), "first-rungs"
        )

    def _prefill_steps(self, active: CompiledRung) -> None:
        """Token by token through the first rung's decode graph: the steps while every live
        sequence is in its prompt (a prompt ending sooner than another's goes on in the decode
        steps)."""
        p0 = now_ns()
        tokens = 0
        sequences = self.sequences
        while (live := sequences.live()).any() and all(
            s.in_prompt for s in sequences.live_ones(live)
        ):
            self._feed(active, live)
            tokens += 1
        p1 = self.timings.first_token_ns = now_ns()
        self.events.prefill(self.first, tokens, p0, p1)
        for s in self.sequences:  # a prompt's own token may end a sequence
            self._stopped(s, p1)
        self.jobs.store_entries()  # what was compiled for the first tokens, off their path
        self._memory(p1)

    def _prefill_each(self) -> None:
        """Each sequence's prompt on the batch-1 prefill graph in turn, into its own row of
        the store; its last logits give its first token. The graph is dropped afterwards.
        The KV's memory is sampled as rows fill (about MEMORY_SAMPLES times) and when the
        prefill ends, interrupted or not, so the report counts the rows written."""
        step, keep = self._prefill_step, self.config.keep_logits
        every = max(1, self.batch // MEMORY_SAMPLES)
        try:
            for s in self.sequences:
                row = self._kv.sequence(s.index)
                step.bind(row.arena)
                p0 = now_ns()
                logits = prefill_chunks(step, s.protocol.prompt, row)
                p1 = now_ns()
                s.prefill_ns = p1 - p0
                self.events.prefill(self.first, len(s.protocol.prompt), p0, p1)
                s.prefilled(logits, p1, keep, self.first)
                self._stopped(s, p1)
                if s.index % every == 0:
                    self._memory(p1)
        finally:
            self._memory(now_ns())
        self.timings.first_token_ns = now_ns()  # decode waits for the first rung from here
        self.jobs.store_entries()  # what was compiled for the first tokens, off their path
        self.jobs.release(self.first, self.prefill_plan.chunk)
        self._prefill_step = None

    def _stopped(self, s: SequenceState, ts: int) -> None:
        if s.stop_reason is not None:
            self.events.sequence_stopped(s.index, s.stop_reason, len(s.tokens), ts)

    def _stop_longest(self) -> None:
        """The top rung cannot hold the next slot of the longest live sequences: they stop."""
        lengths = self._kv.lengths
        top = int(lengths[self.sequences.live()].max())
        for s in self.sequences:
            if s.live and lengths[s.index] == top:
                s.stop_reason = self._top_reached()
                self._stopped(s, now_ns())

    def _take_first_rung(self) -> CompiledRung:
        """The first rung, taken into use: the one prefill ran on, or after a prefill graph,
        waiting for its compile (started beside or during the prefill) or compiling it now
        (after the first token)."""
        if not self.prefill_plan.uses_graph:  # prefilled on it: in use already
            return self.jobs.get(self.first)
        assert self.store is not None and self.timings.first_token_ns is not None
        try:
            if self._first_rungs is not None:  # the rungs compiled during prefill
                future_result(self._first_rungs)
            else:
                self.policy.before_decoding(self.first)  # after the first token
        finally:
            waited = now_ns()
            self.timings.decode_wait_ns = waited - self.timings.first_token_ns
            self.events.foreground(self.timings.first_token_ns, waited)
        self.jobs.store_entries()
        active = self.jobs.get(self.first)
        self.store.take_into_use(active.step)
        self._memory(now_ns())
        return active

    def _feed(
        self, active: CompiledRung, live: np.ndarray, decode: bool = False
    ) -> tuple[np.ndarray, np.ndarray, int, int]:
        """One call of the active rung: each live sequence fed its next token (a prompt
        token, or its last generated or forced one) after its own filled slots, and given
        its row of the logits; a decode step takes --step-delay's emulated device time too.
        Returns the filled lengths before the call, its logits (a row per sequence), and
        when it began and ended; the caller tells who stopped, after its own events."""
        store = self._kv
        ids = self.sequences.next_inputs()
        before = store.lengths.copy()
        a = now_ns()
        out = active.step.run(ids, np.where(live, before, 0))
        if decode:
            self.faults.after_step()
        store.append_rows(out, live)
        b = now_ns()
        logits = out.logits.reshape(self.batch, -1)  # a row per sequence, B = 1 included
        for s in self.sequences.live_ones(live):
            if s.in_prompt:
                s.prefill_ns += b - a
            s.take(logits[s.index], b, self.config.keep_logits, active.capacity)
        return before, logits, a, b

    def _step(self, active: CompiledRung, i: int, live: np.ndarray) -> None:
        """Decode step ``i``: a call of the active rung, its boundary-window entries, its
        memory and counter samples."""
        before, logits, a, b = self._feed(active, live, decode=True)
        for s in self.sequences.live_ones(live):
            t = int(before[s.index])
            if s.fed > len(s.protocol.prompt) and self._record_window(t):
                entry = window_entry(i, t, active.capacity, logits[s.index])
                # A batch-1 report's entries are the format they always were.
                self.window.append({"sequence": s.index, **entry} if self.batch > 1 else entry)
                if self.config.keep_window_logits:
                    self.window_logits.append(logits[s.index].copy())
        self._memory(b)
        self.events.step(i, active.capacity, a, b)
        for s in self.sequences.live_ones(live):
            self._stopped(s, b)
        if (i + 1) % self.config.counter_every == 0:
            self._sample_counters(b, active.capacity)

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
        record.successor(rung, b0, self.schedule.compile is CompileTiming.ONE_AHEAD)
        m0 = now_ns()
        migration = self._kv.grow_to(capacity)
        self._kv.take_into_use(rung.step)
        m1 = now_ns()
        record.migrated(m1 - m0, migration)
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
        """A decode graph compiled: bound to a shared KV buffer now, off the critical path
        (the prefill graph is bound to each sequence's row in turn)."""
        if self.store is not None and step.spec.chunk == 1:
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
        return near_boundary(self.window_rungs, t, self.config.boundary_window)

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


def run_ladder(
    source: ModelSource,
    config: RunConfig | SettledRun,
    events: RunEvents | None = None,
    keep_held: bool = False,
) -> RunResult:
    """One run of ``config`` (settled for ``source`` here unless it already is)."""
    settled = config if isinstance(config, SettledRun) else config.for_model(source)
    return LadderRunner(source, settled, events).run(keep_held)
