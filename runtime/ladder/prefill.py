"""Prefill: running a prompt chunk by chunk after one sequence's filled slots (which graph takes
it is the run's plan: settings/prefill_plan.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compile_ahead.runtime.graphs.step import Step
from compile_ahead.runtime.ladder.kv_store import SequenceKV


def prefill_chunks(step: Step, prompt: Sequence[int], store: SequenceKV) -> np.ndarray:
    """Run a prompt through a step graph chunk by chunk (a static graph's last chunk padded)
    after one sequence's filled slots (``store.sequence(i)``), appending its K/V; returns a
    copy of the last token's logits."""
    chunk = step.spec.chunk
    logits = None
    for start in range(0, len(prompt), chunk):
        ids = np.asarray(prompt[start : start + chunk], np.int64)
        out = step.run(ids, store.length, last_index=len(ids) - 1)
        store.append(out, len(ids))
        logits = out.logits
    assert logits is not None, "empty prompt"
    return logits.copy()
