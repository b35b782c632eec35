"""What a compile gives a run: the step that drives the graph, and what the compile cache did
for it, as fields (never attributes set on the step)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compile_ahead.runtime.compile.cache.outcome import OFF, CacheOutcome, PendingStore

if TYPE_CHECKING:
    from compile_ahead.runtime.compile.worker.protocol import PhaseSpan


@dataclass(frozen=True)
class CompileResult:
    # What drives the compiled graph (graphs/step.py, graphs/ir/step.py, the paged prefill
    # step, graph/split_step.py's SplitStep): bound to a KV store, then run.
    step: Any
    # hit (imported, with its import and checksum seconds), miss (stored, not yet stored, or
    # why not) or off (and why).
    cache: CacheOutcome = OFF
    build_s: float = 0.0  # graph construction on the host (0 on a cache hit)
    compile_s: float = 0.0  # compile_model wall time (0 on a cache hit: nothing was compiled)
    # A compile worker's phases (for the job's trace track); empty when compiled here.
    phases: tuple[PhaseSpan, ...] = ()
    # A miss whose entry is left to the caller (exporting and writing take seconds): written
    # when it calls this, e.g. once the graph has served the first token.
    pending_store: PendingStore | None = None

    @property
    def import_s(self) -> float:
        return self.cache.import_s

    @property
    def verify_s(self) -> float:
        return self.cache.verify_s
