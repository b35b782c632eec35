"""Prefill: a prompt run through a step graph chunk by chunk after the KV store's filled slots."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compile_ahead.runtime.ladder.kv_store import KVStore


def prefill_chunks(step, prompt: Sequence[int], store: KVStore) -> np.ndarray:
    """Run a prompt through a step graph chunk by chunk (the last chunk padded) after the
    store's filled slots, appending its K/V; returns a copy of the last token's logits."""
    chunk = step.spec.chunk
    logits = None
    for start in range(0, len(prompt), chunk):
        ids = np.asarray(prompt[start : start + chunk], np.int64)
        out = step.run(ids, store.length, last_index=len(ids) - 1)
        store.append(out, len(ids))
        logits = out.logits
    assert logits is not None, "empty prompt"
    return logits.copy()
