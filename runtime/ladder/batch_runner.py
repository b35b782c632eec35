"""A batch of B sequences through the ladder: each sequence's prompt prefilled, then one
batched step per token, each sequence greedy (or teacher-forced) on its own.

Prefill follows the run's plan (batch_config.py): with a prefill graph, each sequence's prompt
runs on that batch-1 graph in turn, its K/V written into its own row of the store, and its
last logits give its first token; token by token (chunk 1), every step feeds a sequence still
in its prompt its next prompt token. Either way ragged prompts need no padding. Then every
step feeds each live sequence its last generated (or forced) token. Each sequence has its own
past length; the active rung is the smallest that holds the longest live sequence's next slot,
so a boundary is crossed when that sequence needs it, and copy-and-grow copies every
sequence's rows (reserve-and-commit commits each one's pages as it writes them). A sequence
that reaches EOS, its own token limit or the top rung stops: from then on its row is fed
nothing it keeps (past length 0, its new K/V dropped) and no token of it is reported. The run
ends when every sequence has stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compile_ahead.interrupts import deferred
from compile_ahead.runtime.base.measure import now_ns
from compile_ahead.runtime.ladder.compile_jobs import CompiledRung
from compile_ahead.runtime.ladder.prefill import prefill_chunks
from compile_ahead.runtime.ladder.reporting.batch import batch_fields
from compile_ahead.runtime.ladder.reporting.report import RunReport
from compile_ahead.runtime.ladder.run_protocol import RunProtocol

TOKEN_LIMIT = "token limit"
MEMORY_SAMPLES = 64  # KV memory samples while a batch's prompts are prefilled


@dataclass
class SequenceState:
    """One sequence of a batch: what it was fed, what it generated, why it stopped."""

    index: int
    protocol: RunProtocol
    fed: int = 0  # tokens fed so far (prompt, then generated or forced)
    tokens: list[int] = field(default_factory=list)  # the prompt's top-1, then each step's
    logits: list[np.ndarray] = field(default_factory=list)  # each token's, when kept
    stop_reason: str | None = None
    first_token_ns: int | None = None
    prefill_ns: int = 0  # its prompt's time: on the prefill graph, or its prompt steps'

    @property
    def live(self) -> bool:
        return self.stop_reason is None

    def next_input(self) -> int:
        prompt = self.protocol.prompt
        if self.fed < len(prompt):
            return prompt[self.fed]
        return self.protocol.next_input(self.fed - len(prompt), self.tokens[-1])

    @property
    def in_prompt(self) -> bool:
        return self.fed < len(self.protocol.prompt)

    def prefilled(self, logits: np.ndarray, ts: int, keep_logits: bool) -> None:
        """Its whole prompt was prefilled at once: ``logits`` are its last token's."""
        self.fed = len(self.protocol.prompt) - 1
        self.take(logits, ts, keep_logits)

    def take(self, logits: np.ndarray, ts: int, keep_logits: bool) -> None:
        """The logits of the token just fed: past the prompt they give the next token, and
        the sequence stops at EOS or at its own token limit."""
        self.fed += 1
        produced = self.fed - len(self.protocol.prompt)  # 0: the prompt's last token
        if produced < 0:
            return
        token = int(np.argmax(logits))
        if produced == 0:
            self.first_token_ns = ts
        self.tokens.append(token)
        if keep_logits:
            self.logits.append(logits.copy())
        if self.protocol.ends(token):
            self.stop_reason = "eos"
        elif produced >= self.protocol.decode_tokens:
            self.stop_reason = TOKEN_LIMIT

    def to_json(self, command_ns: int, run_stop: str = "not stopped") -> dict[str, Any]:
        """Its report entry; a sequence the run's end cut short (an interrupt, an error)
        stops with the run's reason."""
        first = self.first_token_ns
        return {
            "sequence": self.index,
            "prompt_len": len(self.protocol.prompt),
            "tokens_generated": len(self.tokens),
            "tokens": self.tokens,
            "stop_reason": self.stop_reason or run_stop,
            "first_token_s": None if first is None else (first - command_ns) / 1e9,
        }


class BatchDecode:
    """A ladder runner's prefill and decode at batch B > 1 (the runner makes one when its
    settled run has a batch): the runner's compile, KV, boundary and event machinery, stepped
    for B sequences."""

    def __init__(self, runner: Any) -> None:  # a LadderRunner (runner.py imports this module)
        self.runner = runner
        self.sequences = [SequenceState(i, p) for i, p in enumerate(runner.config.sequences)]

    def generate(self) -> str:
        """Every sequence from its prompt to its stop; why the run ended."""
        r = self.runner
        active = r._before_decoding()  # the first rung's batched decode graph, in use
        if active is None:  # a prefill graph: each sequence's prompt on it, then the rung
            self._prefill_each()
            if not self._live().any():
                return "completed"
            active = r._take_first_rung()
        r.policy.rung_taken(r.first, r._kv.length)
        step = 0
        while (live := self._live()).any():
            need = r._rung_for(int(r._kv.lengths[live].max()) + 1)
            if need < 0:
                self._stop_longest()
                continue
            if need > active.capacity:
                active = r._switch(active, need, step)
            with deferred():  # a step whole: an interrupt ends the run after it
                self._step(active, step, live)
            step += 1
        return "completed"

    def _prefill_each(self) -> None:
        """Each sequence's prompt on the batch-1 prefill graph in turn, into its own row of
        the store; its last logits give its first token. The graph is dropped afterwards."""
        r = self.runner
        step, keep = r._prefill_step, r.config.keep_logits
        # The KV's memory is sampled as rows fill (about MEMORY_SAMPLES times) and when the
        # prefill ends, interrupted or not, so the report counts the rows written.
        every = max(1, len(self.sequences) // MEMORY_SAMPLES)
        try:
            for s in self.sequences:
                row = r._kv.sequence(s.index)
                step.bind(row.arena)
                p0 = now_ns()
                logits = prefill_chunks(step, s.protocol.prompt, row)
                p1 = now_ns()
                s.prefill_ns = p1 - p0
                r.events.prefill(r.first, len(s.protocol.prompt), p0, p1)
                s.prefilled(logits, p1, keep)
                if s.stop_reason is not None:
                    r.events.sequence_stopped(s.index, s.stop_reason, len(s.tokens), p1)
                if s.index % every == 0:
                    r._memory(p1)
        finally:
            r._memory(now_ns())
        r._first_token_ns = now_ns()  # decode waits for the first rung from here
        r._memory(r._first_token_ns)
        r.jobs.store_entries()  # what was compiled for the first tokens, off their path
        r.jobs.release(r.first, r.prefill_plan.chunk)
        r._prefill_step = None

    def _live(self) -> np.ndarray:
        return np.array([s.live for s in self.sequences])

    def _stop_longest(self) -> None:
        """The top rung cannot hold the next slot of the longest live sequences: they stop."""
        lengths = self.runner._kv.lengths
        top = int(lengths[self._live()].max())
        for s in self.sequences:
            if s.live and lengths[s.index] == top:
                s.stop_reason = self.runner._top_reached()
                self.runner.events.sequence_stopped(s.index, s.stop_reason, len(s.tokens), now_ns())

    def _step(self, active: CompiledRung, i: int, live: np.ndarray) -> None:
        r = self.runner
        store = r._kv
        ids = np.array([s.next_input() if s.live else 0 for s in self.sequences], np.int64)
        before = store.lengths.copy()
        a = now_ns()
        out = active.step.run(ids, np.where(live, before, 0))
        r.faults.after_step()
        store.append_rows(out, live)
        b = now_ns()
        keep = r.config.keep_logits
        for s in self.sequences:
            if live[s.index]:
                if s.in_prompt:
                    s.prefill_ns += b - a
                s.take(out.logits[s.index], b, keep)
                t = int(before[s.index])
                if s.fed > len(s.protocol.prompt) and r._record_window(t):
                    entry = r._window_entry(i, t, active.capacity, out.logits[s.index])
                    r.window.append({"sequence": s.index, **entry})
        r._memory(b)
        r.events.step(i, active.capacity, a, b)
        for s in self.sequences:
            if live[s.index] and s.stop_reason is not None:
                r.events.sequence_stopped(s.index, s.stop_reason, len(s.tokens), b)
        if (i + 1) % r.config.counter_every == 0:
            r._sample_counters(b, active.capacity)

    def first_token_ns(self) -> int | None:
        """When the batch's first token came."""
        first = [s.first_token_ns for s in self.sequences if s.first_token_ns is not None]
        return min(first) if first else None

    def amend(self, report: RunReport, command_ns: int, step_ns: list[int]) -> None:
        """The batch's part of the run report."""
        report.tokens_decoded = sum(max(0, len(s.tokens) - 1) for s in self.sequences)
        plan = self.runner.prefill_plan
        by_graph = plan.uses_graph
        each = [s.prefill_ns for s in self.sequences]
        # On a prefill graph the prompts run one after another; token by token, together.
        report.prefill_s = (sum(each) if by_graph else max(each)) / 1e9
        report.prefill["prefill_s"] = report.prefill_s
        report.prefill["sequences"] = [
            {"sequence": s.index, "prompt_len": len(s.protocol.prompt), "prefill_s": ns / 1e9}
            for s, ns in zip(self.sequences, each, strict=True)
        ]
        sequences = [s.to_json(command_ns, report.stop_reason) for s in self.sequences]
        from_prefill = sum(1 for s in self.sequences if s.tokens) if by_graph else 0
        report.extra.update(batch_fields(report, sequences, step_ns, from_prefill))

    def results(self) -> tuple[list[dict[str, Any]], list[list[np.ndarray]]]:
        """Each sequence's report entry and, when kept, its tokens' logits."""
        return [s.to_json(0) for s in self.sequences], [s.logits for s in self.sequences]
