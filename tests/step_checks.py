"""What every compiled step must do, checked for any model source: its outputs follow the
request, call after call."""

from __future__ import annotations

import numpy as np

from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.graphs.spec import LOGITS, GraphSpec, new_key_name
from compile_ahead.runtime.model.kv_arena import KVArena
from conftest import F32


def _held(step, layers: int) -> tuple[np.ndarray, list[np.ndarray]]:
    get = step.request.get_tensor
    return get(LOGITS).data, [get(new_key_name(i)).data for i in range(layers)]


def check_outputs_follow_the_request(source, dynamic: bool) -> None:
    """Two calls of one step: the second's record is its own and holds what the request holds."""
    layers = source.config.num_layers
    spec = GraphSpec(32, 4, "f32", dynamic=True) if dynamic else GraphSpec(32, 1, "f32")
    step = compile_step(source, spec, F32).step
    step.bind(KVArena(source.config, 32, "f32"))
    first = step.run(np.asarray([5]), 3)
    kept = first.logits.copy()
    assert np.isfinite(kept).all() and np.any(kept)  # written by the plugin
    second = step.run(np.asarray([9]), 4)
    assert second is not first
    logits, keys = _held(step, layers)
    assert np.array_equal(second.logits, logits.reshape(-1, logits.shape[-1])[-1])
    for ours, held in zip(second.new_keys, keys, strict=True):
        assert np.array_equal(ours, held)
    assert not np.array_equal(kept, second.logits)  # another token: the outputs were rewritten
