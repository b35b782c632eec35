"""Whether a run fits the host's memory, checked before anything is allocated or compiled.

A run at batch B holds, besides its weights, three things that grow with B:

- the KV: what the schedule's policy holds at its peak for the longest sequence's slots
  (copy-grow: both buffers during the last copy; reserve-commit: only the pages written;
  reserve-top: the top rung);
- the logits: each decode step's [B, vocab] f32 output, and the host's copy of it;
- the activations of one layer, which the plugin reuses layer after layer: the hidden state,
  the MLP's intermediate, and the attention scores over the top rung, [B, heads, C] in f32.

The sum is compared with what the process can still allocate (the host's MemAvailable, its
cgroup's limit, its `ulimit -v`) before the run starts; a run that needs more is refused in
one line that gives each part, so B or the ladder can be chosen to fit.
"""

from __future__ import annotations

import resource

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.precision import STORAGE_DTYPES
from compile_ahead.runtime.ladder.settings.schedules import KVPolicy
from compile_ahead.runtime.model.architecture import ModelConfig

F32 = 4  # bytes: logits and activations are f32 on the host and in the decode graphs
LOGITS_COPIES = 2  # the graph's output buffer and the host's copy the runner reads


def available_memory_bytes() -> int | None:
    """What this process can still allocate: the least of the host's MemAvailable, the
    room left under its cgroup's memory.max and under its address-space limit (ulimit -v);
    None where none of them says."""
    room = [n for n in (_mem_available(), _cgroup_room(), _address_space_room()) if n is not None]
    return min(room) if room else None


def _mem_available() -> int | None:
    return _meminfo_kib("/proc/meminfo", "MemAvailable:")


def _cgroup_room() -> int | None:
    """memory.max - memory.current of this process's cgroup (v2), when it has a limit."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next(line.split(":", 2)[2].strip() for line in f if line.startswith("0::"))
        base = f"/sys/fs/cgroup{path}"
        with open(f"{base}/memory.max") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open(f"{base}/memory.current") as f:
            return max(0, int(limit) - int(f.read()))
    except (OSError, StopIteration, ValueError):
        return None


def _address_space_room() -> int | None:
    """RLIMIT_AS - VmSize: what `ulimit -v` leaves this process to map."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    size = _meminfo_kib("/proc/self/status", "VmSize:")
    return None if size is None else max(0, soft - size)


def _meminfo_kib(path: str, key: str) -> int | None:
    """A ``key: N kB`` line of a /proc file, in bytes."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def kv_bytes(
    policy: KVPolicy,
    cfg: ModelConfig,
    rungs: tuple[int, ...],
    slots: int,
    precision: str,
    batch: int,
) -> tuple[int, int]:
    """(bytes, rung): the KV the policy holds at its peak for ``slots`` tokens of each of
    ``batch`` sequences, and the rung that peak is on."""
    per_slot = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * batch
    per_slot *= STORAGE_DTYPES[precision].itemsize
    rung = next((r for r in rungs if r >= slots), rungs[-1])
    if policy is KVPolicy.COPY_GROW:
        below = [r for r in rungs if r < rung]
        return per_slot * (rung + (below[-1] if below else 0)), rung
    if policy is KVPolicy.RESERVE_COMMIT:
        return per_slot * slots, rung
    return per_slot * rungs[-1], rung


def step_bytes(cfg: ModelConfig, top: int, batch: int) -> tuple[int, int]:
    """(logits, activations): a decode step's bytes at batch ``batch`` on the top rung."""
    logits = LOGITS_COPIES * batch * cfg.vocab_size * F32
    layer = 2 * cfg.hidden_size + 2 * cfg.intermediate_size + cfg.num_heads * (top + 1)
    return logits, batch * layer * F32


def check_run_fits(
    policy: KVPolicy,
    cfg: ModelConfig,
    rungs: tuple[int, ...],
    slots: int,
    precision: str,
    batch: int = 1,
) -> None:
    """Refuse, before allocating, a run whose KV, logits and activations would not fit the
    host's available memory."""
    kv, rung = kv_bytes(policy, cfg, rungs, slots, precision, batch)
    logits, activations = step_bytes(cfg, rungs[-1], batch)
    need = kv + logits + activations
    available = available_memory_bytes()
    if available is None or need <= available:
        return
    sequences = f"{batch} sequences of up to {slots}" if batch > 1 else f"{slots}"
    raise CompileAheadError(
        f"a run of {sequences} tokens needs {_gib(need)} GiB (KV {_gib(kv)} GiB, "
        f"{policy.value}, rung {rung}; logits {_gib(logits)} GiB; activations "
        f"{_gib(activations)} GiB) but only {_gib(available)} GiB of memory is available"
    )


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f}"
