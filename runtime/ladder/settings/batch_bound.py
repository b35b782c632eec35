"""The stated bound on B, the sequences a run steps together, checked wherever a B is given
(`run`, `generate`, `profile-compile --batch`, `ab ... --batch`, a campaign's `batch` axis)
before anything is compiled, allocated or written.

The bound keeps the per-sequence work a run does before its memory check (one prompt and one
protocol per sequence) to a fraction of a second, and every [B, ...] shape far inside the
device's 32-bit dimensions. The host's memory is checked separately, once the model's shapes
are known (ladder/settings/memory_check.py); this bound holds whatever the memory.

Importing this module must not load OpenVINO: campaign spec checks and flag parsing use it.
"""

from __future__ import annotations

from compile_ahead.errors import CompileAheadError

# Far above any batch a static-shape device serves (vLLM's largest default CUDA-graph batch
# is 512), and small enough that B prompts are settled in well under a second.
MAX_BATCH = 4096


def check_batch_size(value: object, flag: str = "--batch") -> int:
    """``value`` as a B in 1..MAX_BATCH, or one line naming ``flag``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise CompileAheadError(f"{flag} must be an integer in 1..{MAX_BATCH}, got {value!r}")
    if not 1 <= value <= MAX_BATCH:
        raise CompileAheadError(
            f"{flag} must be in 1..{MAX_BATCH} (sequences stepped together), got {value}"
        )
    return value
