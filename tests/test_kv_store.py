"""KV memory: committed-page accounting agrees with the kernel's own count."""

from __future__ import annotations

from compile_ahead.runtime.model.kv_arena import PAGE, KVArena
from compile_ahead.runtime.model.presets import PRESETS


def _anonymous_bytes() -> int:
    with open("/proc/self/smaps_rollup") as f:
        lines = f.read().splitlines()
    for line in lines:
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no Anonymous line in smaps_rollup")


def test_committed_pages_follow_written_slots_exactly():
    cfg = PRESETS["qwen2.5-0.5b"].config  # 24 layers, 2 KV heads, head_dim 64
    before = _anonymous_bytes()
    arena = KVArena(cfg, 8192, "bf16")
    assert _anonymous_bytes() - before < 1 << 20  # reserving commits nothing
    for length in (128, 1024, 4096, 8000):
        for layer in range(cfg.num_layers):
            arena.keys[layer][:, :, :length] = 1
            arena.values[layer][:, :, :length] = 1
        measured = _anonymous_bytes() - before
        expected = arena.committed_bytes(length)
        # bf16 slots are 128 B: 32 per page, so committed is the live KV rounded to pages.
        assert expected == 2 * 24 * 2 * -(-length * 128 // PAGE) * PAGE
        assert abs(measured - expected) < 1 << 20, (length, measured, expected)
    arena.close()
    assert _anonymous_bytes() - before < 1 << 20  # unmapping returns it


def test_committed_bytes_with_heads_sharing_pages():
    cfg = PRESETS["tiny"].config  # head_dim 16: a head row of 16 slots is 1 KiB at f32
    arena = KVArena(cfg, 16, "f32")
    # Both heads of a tensor live in one page: writing one slot per head touches one page.
    assert arena.committed_bytes(1) == PAGE * 2 * cfg.num_layers
    assert arena.committed_bytes(0) == 0
    arena.close()
