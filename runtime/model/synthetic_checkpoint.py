"""Synthetic preset weights written once as a Hugging Face checkpoint in the user cache.

A preset without a real checkpoint gets seeded random weights. Held as numpy arrays they make
the CPU plugin's compile several times slower than the same shapes memory-mapped from a file,
so they are written once (config.json + model.safetensors, keyed by preset, seed and dtype)
and then loaded by the same code path as a real checkpoint. The source stays labelled
synthetic everywhere, and the one-time generation is timed apart from any compile.

A checkpoint directory only ever appears complete: it is written under a temporary name and
renamed into place, with a lock file so two processes never generate the same one at once.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import struct
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from compile_ahead.errors import CompileAheadWarning
from compile_ahead.runtime.base.precision import STORAGE_DTYPES
from compile_ahead.runtime.base.user_cache import cache_lock, cache_root
from compile_ahead.runtime.model.architecture import ModelConfig
from compile_ahead.runtime.model.file_identity import wait_until_settled
from compile_ahead.runtime.model.presets import PRESETS
from compile_ahead.runtime.model.synthetic_store import SyntheticStore

# Bump when SyntheticStore's draws change, so checkpoints of the old values are not reused.
GENERATOR_VERSION = 1
# config.json key (and safetensors metadata key) that marks a checkpoint as synthetic.
MARKER_KEY = "compile_ahead_synthetic"
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"

_SAFETENSORS_NAMES = {"f16": "F16", "bf16": "BF16", "f32": "F32"}
_TORCH_NAMES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}
_HF_ARCH = {"qwen2": ("Qwen2ForCausalLM", "qwen2"), "llama": ("LlamaForCausalLM", "llama")}
PROGRESS_INTERVAL_S = 5.0  # a plain progress line this often when stderr is not a terminal


class SyntheticCheckpointWarning(CompileAheadWarning):
    """A synthetic checkpoint was unusable (regenerated) or could not be written (in memory)."""


def identity(preset: str, seed: int, dtype: str) -> dict[str, Any]:
    """What the weight values depend on (the checkpoint's marker and directory name). The
    compile cache names the weights by the file, as a real checkpoint's: one changed in place is
    other weights to it."""
    return {"preset": preset, "seed": seed, "dtype": dtype, "generator": GENERATOR_VERSION}


def hf_config(cfg: ModelConfig, dtype: str, marker: dict[str, Any] | None = None) -> dict:
    """A Hugging Face config.json for ``cfg`` that config_from_hf reads back as ``cfg``."""
    arch, model_type = _HF_ARCH[cfg.architecture]
    out: dict[str, Any] = {
        "architectures": [arch],
        "model_type": model_type,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope.theta,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "max_position_embeddings": cfg.max_position_embeddings,
        "eos_token_id": list(cfg.eos_token_ids),
        "torch_dtype": _TORCH_NAMES[dtype],
    }
    if cfg.architecture == "llama":
        out["attention_bias"] = cfg.attention_bias
    if cfg.rope.rope_type != "default":
        scaling: dict[str, Any] = {"rope_type": cfg.rope.rope_type, "factor": cfg.rope.factor}
        if cfg.rope.rope_type == "llama3":
            scaling |= {
                "low_freq_factor": cfg.rope.low_freq_factor,
                "high_freq_factor": cfg.rope.high_freq_factor,
                "original_max_position_embeddings": cfg.rope.original_max_position_embeddings,
            }
        out["rope_scaling"] = scaling
    if marker is not None:
        out[MARKER_KEY] = marker
    return out


def checkpoint_dir(preset: str, seed: int, dtype: str, root: Path | None = None) -> Path:
    """Where the checkpoint of (preset, seed, dtype) lives; the preset's shapes are part of the
    name, so editing a preset never reuses a checkpoint of the old shapes."""
    cfg = PRESETS[preset].config
    shapes = hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True).encode()).hexdigest()[:10]
    name = f"{preset}-seed{seed}-{dtype}-g{GENERATOR_VERSION}-{shapes}"
    return (root or cache_root()) / "synthetic" / name


def synthetic_identity(model_dir: Path) -> dict[str, Any] | None:
    """The synthetic marker of a checkpoint directory, or None for a real checkpoint."""
    try:
        raw = json.loads((model_dir / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return None
    marker = raw.get(MARKER_KEY) if isinstance(raw, dict) else None
    return marker if isinstance(marker, dict) else None


def _safetensors_header(store: SyntheticStore, marker: dict[str, Any]) -> tuple[bytes, int]:
    """The file's header bytes (length prefix included) and the total file size."""
    dtype = store.dtype
    itemsize = STORAGE_DTYPES[dtype].itemsize
    header: dict[str, Any] = {"__metadata__": {"format": "pt", MARKER_KEY: json.dumps(marker)}}
    offset = 0
    for name in store.names():
        shape = store.shape(name)
        nbytes = math.prod(shape) * itemsize
        header[name] = {
            "dtype": _SAFETENSORS_NAMES[dtype],
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # keep the tensor data 8-byte aligned for memory mapping
    prefix = struct.pack("<Q", len(raw)) + raw
    return prefix, len(prefix) + offset


class _Progress:
    """Bytes written: a tqdm bar on a terminal, else a plain line every few seconds."""

    def __init__(self, total: int, what: str, stream: TextIO):
        self.total, self.what, self.stream = total, what, stream
        self.done = 0
        self.t0 = time.monotonic()
        self._last = self.t0
        self._bar = None
        if stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="B", unit_scale=True, desc=what, file=stream)
        else:
            print(f"{what}: {total / 1e6:.0f} MB ...", file=stream, flush=True)

    def add(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last >= PROGRESS_INTERVAL_S:
            self._last = now
            print(
                f"{self.what}: {100 * self.done / self.total:.0f}% "
                f"({self.done / 1e6:.0f}/{self.total / 1e6:.0f} MB, {now - self.t0:.0f} s)",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(
    directory: Path, preset: str, store: SyntheticStore, marker: dict[str, Any], stream: TextIO
) -> None:
    cfg = PRESETS[preset].config
    prefix, total = _safetensors_header(store, marker)
    progress = _Progress(total, f"writing synthetic {preset} weights (seed {store.seed})", stream)
    try:
        with (directory / WEIGHTS_FILE).open("wb") as f:
            f.write(prefix)
            progress.add(len(prefix))
            for name in store.names():
                data = store.draw(name).array
                f.write(data.data.cast("B"))  # the array's bytes in place
                progress.add(data.nbytes)
            f.flush()
            os.fsync(f.fileno())
    finally:
        progress.close()
    config = json.dumps(hf_config(cfg, store.dtype, marker), indent=2) + "\n"
    with (directory / CONFIG_FILE).open("w") as f:
        f.write(config)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(directory, 0o755)  # mkdtemp makes it private; the cache is an ordinary directory


def _is_complete(directory: Path, marker: dict[str, Any], expected_size: int) -> bool:
    try:
        size = (directory / WEIGHTS_FILE).stat().st_size
    except OSError:
        return False
    return size == expected_size and synthetic_identity(directory) == marker


@dataclass(frozen=True)
class MaterializedCheckpoint:
    path: Path
    identity: dict[str, Any]
    generated: bool  # written by this call
    materialize_s: float  # time spent writing it (0 when reused)


def ensure_checkpoint(
    preset: str,
    seed: int = 0,
    dtype: str = "f16",
    root: Path | None = None,
    stream: TextIO | None = None,
    rewrite: bool = False,
) -> MaterializedCheckpoint:
    """The checkpoint directory of (preset, seed, dtype), written now if absent or unusable
    (``rewrite``: the caller found the existing one unreadable)."""
    stream = stream or sys.stderr
    store = SyntheticStore(PRESETS[preset].config, seed, dtype=dtype)
    marker = identity(preset, seed, dtype)
    final = checkpoint_dir(preset, seed, dtype, root)
    _, expected_size = _safetensors_header(store, marker)
    if not rewrite and _is_complete(final, marker, expected_size):
        return MaterializedCheckpoint(final, marker, False, 0.0)
    parent = final.parent
    with cache_lock(parent / f".{final.name}.lock", f"synthetic {preset} weights", stream):
        if not rewrite and _is_complete(final, marker, expected_size):  # written meanwhile
            return MaterializedCheckpoint(final, marker, False, 0.0)
        for stale in parent.glob(f".{final.name}.tmp-*"):  # left by a killed writer
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():
            warnings.warn(
                f"{final}: incomplete or corrupt synthetic checkpoint; writing it again",
                SyntheticCheckpointWarning,
                stacklevel=3,
            )
            aside = parent / f".{final.name}.tmp-broken-{os.getpid()}"
            final.rename(aside)
            shutil.rmtree(aside, ignore_errors=True)
        free = shutil.disk_usage(parent).free
        if free < expected_size + (64 << 20):  # refuse before writing, not half-way through
            raise OSError(
                errno.ENOSPC,
                f"{expected_size / 1e9:.1f} GB needed, {free / 1e9:.1f} GB free in {parent}",
            )
        t0 = time.perf_counter()
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=parent))
        try:
            _write(tmp, preset, store, marker, stream)
            # Published once a later write would change the file's ctime: the compile cache
            # names synthetic weights by the file and uses none opened before then.
            wait_until_settled(tmp / WEIGHTS_FILE)
            tmp.rename(final)
            _fsync_dir(parent)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        elapsed = time.perf_counter() - t0
    print(
        f"synthetic {preset} weights (seed {seed}, {dtype}, {expected_size / 1e6:.0f} MB) "
        f"written to {final} in {elapsed:.1f} s (once; later runs memory-map the file)",
        file=stream,
        flush=True,
    )
    return MaterializedCheckpoint(final, marker, True, elapsed)
