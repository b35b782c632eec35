"""A run's report assembled from what the runner kept (runner.py): the ladder's part, each
sequence's part and a batch's figures, and a forced document's score. The runner measures; this
module only gathers and converts."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from compile_ahead.runtime.base.measure import peak_rss_bytes
from compile_ahead.runtime.compile.settings.modes import GraphMode
from compile_ahead.runtime.ladder.reporting.batch import BatchStats, SequenceReport
from compile_ahead.runtime.ladder.reporting.perplexity import TextScore
from compile_ahead.runtime.ladder.reporting.report import RunReport

if TYPE_CHECKING:
    from compile_ahead.runtime.ladder.compile_jobs import CompileJob
    from compile_ahead.runtime.ladder.runner import LadderRunner


@dataclass
class RunResult:
    report: RunReport
    predicted: list[int]  # the first sequence's top-1 after each of its decode steps
    logits: list[np.ndarray]  # those steps' logits when keep_logits, else empty
    error: BaseException | None = None
    step_ns: list[int] = field(default_factory=list)  # wall time of decode step i
    step_context: list[int] = field(default_factory=list)  # KV slots filled before step i
    # The first sequence's prompt's last logits' top-1: its first token (None: not reached).
    first_token: int | None = None
    first_logits: np.ndarray | None = None  # the prompt's last logits, when keep_logits
    jobs: list[CompileJob] = field(default_factory=list)  # every compile that finished
    # Every sequence's report entry (its tokens, stop reason, ...) and, when keep_logits, the
    # logits of each of its tokens.
    sequences: list[dict[str, Any]] = field(default_factory=list)
    sequence_logits: list[list[np.ndarray]] = field(default_factory=list)
    # With keep_window_logits: the logits of each report.boundary_tokens entry, in its order.
    window_logits: list[np.ndarray] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        """Neither failed nor interrupted: its outputs may replace earlier ones."""
        return self.error is None and not self.report.interrupted


@dataclass
class RunTimings:
    """The waits the runner measures for its report, in ns."""

    first_token_ns: int | None = None  # when the run's first token came
    first_token_compile_ns: int = 0  # foreground compile before the first token
    decode_wait_ns: int = 0  # after prefill, waiting for the first rung's decode graph
    store_wait_ns: int = 0  # after the protocol, waiting for cache entries to be written


def assemble_report(
    run: LadderRunner, start: int, end: int, stop: str, error: BaseException | None
) -> RunReport:
    """The run's report: the ladder's part, then each sequence's (every greedy run, and a
    batch's own figures at B > 1), then a forced document's score."""
    started = run.config.started_ns
    command = min(started, start) if started is not None else start
    first = run.sequences.first_token_ns()
    if first is not None:  # the run's first token: the first any sequence gave
        run.timings.first_token_ns = first
    report = _ladder_part(run, start, end, stop, error)
    report.tokens_decoded = run.sequences.tokens_decoded()
    if run.batch > 1:  # a batch-1 report is the format it always was, and these
        _batch_part(run, report, command)
    elif run.protocol.name == "greedy":
        report.sequences = [run.sequences.each[0].to_json(command, report.stop_reason)]
    if run.protocol.document is not None:
        scores = [x for s in run.sequences for x in s.scores]
        report.text_score = TextScore.of(run.protocol.document, len(run.protocol.prompt), scores)
    return report


def _batch_part(run: LadderRunner, report: RunReport, command_ns: int) -> None:
    """Each sequence's prompt, tokens and stop, and the batch's rate, step and KV."""
    by_graph = run.prefill_plan.uses_graph
    each = [s.prefill_ns for s in run.sequences]
    # On a prefill graph the prompts run one after another; token by token, together.
    report.prefill_s = (sum(each) if by_graph else max(each)) / 1e9
    report.prefill["prefill_s"] = report.prefill_s
    report.prefill["sequences"] = [
        {"sequence": s.index, "prompt_len": len(s.protocol.prompt), "prefill_s": ns / 1e9}
        for s, ns in zip(run.sequences, each, strict=True)
    ]
    sequences = [SequenceReport(**s.to_json(command_ns, report.stop_reason)) for s in run.sequences]
    from_prefill = sum(1 for s in run.sequences if s.tokens) if by_graph else 0
    kv = {
        "kv_reserved_avg_bytes": report.kv_reserved_avg_bytes,
        "kv_reserved_peak_bytes": report.kv_reserved_peak_bytes,
        "kv_committed_avg_bytes": report.kv_committed_avg_bytes,
        "kv_committed_peak_bytes": report.kv_committed_peak_bytes,
    }
    report.batch = BatchStats.of(sequences, run.accounting.step_ns, from_prefill, kv)


def _ladder_part(
    run: LadderRunner, start: int, end: int, stop: str, error: BaseException | None
) -> RunReport:
    s, acct, store = run.config, run.accounting, run.store
    cache = run.options.cache
    jobs = run.jobs.finished
    first = next((j for j in jobs if j.capacity == run.first and j.chunk == 1), None)
    ft = run.timings.first_token_ns
    command = min(s.started_ns, start) if s.started_ns is not None else start
    return RunReport(
        model=run.source.describe(),
        device=run.options.device,
        inference_precision=run.options.inference_precision,
        ov_config=dict(run.options.extra_config),
        decode_defaults=run.decode_defaults,
        kv_precision=run.kv_precision,
        schedule=run.schedule.name,
        schedule_title=run.schedule.title,
        graph=s.graph,
        placement=s.placement,
        kv_policy=run.schedule.kv.value,
        ladder=list(s.ladder.rungs),
        rungs_used=list(run.rungs),
        protocol=s.protocol.name,
        prompt_len=len(s.protocol.prompt),
        decode_tokens=s.protocol.decode_tokens,
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
        first_token_compile_s=run.timings.first_token_compile_ns / 1e9,
        prefill=run.prefill_plan.to_json()
        | ({"decode_compile": run.decode_compile} if run.prefill_plan.uses_graph else {}),
        decode_graph_wait_s=run.timings.decode_wait_ns / 1e9,
        rungs=[acct.rungs[c] for c in sorted(acct.rungs)],
        boundaries=run.boundaries,
        boundary_tokens=run.window,
        kv_reserved_avg_bytes=acct.reserved.average(end),
        kv_reserved_peak_bytes=int(acct.reserved.peak),
        kv_committed_avg_bytes=acct.committed.average(end),
        kv_committed_peak_bytes=int(acct.committed.peak),
        graphs_resident_max=run.jobs.resident_max,
        # Whole graphs each hold a compiled copy of the weights; split rungs share one.
        weight_copies_resident_max=1 if s.graph is GraphMode.SPLIT else run.jobs.resident_max,
        compiles_in_flight_max=run.jobs.in_flight_max,
        compile_jobs=[j.to_json() for j in jobs],
        compile_cache_dir=str(cache.directory) if cache is not None else None,
        cache_store_wait_s=run.timings.store_wait_ns / 1e9,
        peak_rss_bytes=peak_rss_bytes(),
        error=f"{type(error).__name__}: {error}" if error is not None else None,
    )


def logits_digest(logits: np.ndarray) -> str:
    """A short digest of one step's logits (equal digests: equal logits, bit for bit)."""
    return hashlib.sha256(np.ascontiguousarray(logits, np.float32).tobytes()).hexdigest()[:16]


def window_entry(step: int, context: int, capacity: int, logits: np.ndarray) -> dict:
    """A boundary-window step's record: its top-5 tokens and logits, and the logits' digest."""
    top = np.argsort(logits)[::-1][:5]
    return {
        "step": step,
        "context": context,
        "rung": capacity,
        "top1": int(top[0]),
        "top5": [int(x) for x in top],
        "top5_logits": [float(logits[x]) for x in top],
        "logits_digest": logits_digest(logits),
    }
