"""A model's identity: what a node must see exactly as the coordinator does to run its cells.

A preset with synthetic weights is what its values depend on (preset, seed, dtype, generator
version: runtime/model/synthetic_checkpoint.py), so no node has to write the weights to be
checked. Anything read from files (a checkpoint directory, a cached hub snapshot, an IR or
ONNX file) is the SHA-256 of each of its files by name; paths are left out, since each node
keeps them where it likes. Digests are remembered per file (path, size, mtime) in the user
cache, so a large checkpoint is read once per machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.atomic import write_json_atomic
from compile_ahead.runtime.base.user_cache import cache_root

_DIGESTS = "campaigns/file-digests.json"
_CHUNK = 1 << 20


def _digest_memo() -> Path:
    return cache_root() / _DIGESTS


def _load_memo() -> dict[str, str]:
    try:
        memo = json.loads(_digest_memo().read_text())
    except (OSError, ValueError):
        return {}
    return memo if isinstance(memo, dict) else {}


def file_digests(files: list[Path]) -> dict[str, str]:
    """name -> SHA-256 of each file (symlinks followed), remembered by path, size and mtime."""
    memo = _load_memo()
    out: dict[str, str] = {}
    changed = False
    for path in sorted(files, key=lambda p: p.name):
        st = path.stat()
        key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
        if key not in memo:
            h = hashlib.sha256()
            with path.open("rb") as fh:
                while chunk := fh.read(_CHUNK):
                    h.update(chunk)
            memo[key] = h.hexdigest()
            changed = True
        out[path.name] = memo[key]
    if changed:  # an unwritable cache only costs reading the files again next time
        with contextlib.suppress(CompileAheadError):
            write_json_atomic(_digest_memo(), memo)
    return out


def _model_files(path: Path) -> list[Path]:
    if path.is_file():
        files = [path]
        if path.suffix.lower() == ".xml" and path.with_suffix(".bin").is_file():
            files.append(path.with_suffix(".bin"))
        return files
    return [p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")]


def _files_identity(path: Path, name: str) -> dict:
    files = _model_files(path)
    if not files:
        raise CompileAheadError(f"model {name}: {path} holds no files")
    return {"model": name, "files": file_digests(files)}


def _check_dtype(name: str, synthetic_dtype: str | None, where: str) -> None:
    if synthetic_dtype is not None:
        raise CompileAheadError(
            f"model {name}: synthetic_dtype {synthetic_dtype} is for a preset's synthetic "
            f"weights; it has real weights ({where})"
        )


def _path_identity(path: Path, name: str, synthetic_dtype: str | None) -> dict:
    if path.is_dir():
        from compile_ahead.runtime.model.synthetic_checkpoint import synthetic_identity

        synthetic = synthetic_identity(path)
        if synthetic is not None:
            if synthetic_dtype not in (None, synthetic.get("dtype")):
                raise CompileAheadError(
                    f"model {name}: holds synthetic {synthetic.get('dtype')} weights, the "
                    f"campaign asks for {synthetic_dtype}"
                )
            return {"model": name, "synthetic": synthetic}
    _check_dtype(name, synthetic_dtype, str(path))
    return _files_identity(path, name)


def model_identity(name: str, synthetic_dtype: str | None = None) -> dict:
    """The identity of ``--model name`` (with ``--synthetic-dtype``) as `ab` would resolve it
    here: a path, a preset (its cached real checkpoint first), or a cached hub id. One line
    when this machine cannot see it."""
    from compile_ahead.runtime.model.presets import PRESETS, SYNTHETIC_SEED
    from compile_ahead.runtime.model.synthetic_checkpoint import identity
    from compile_ahead.runtime.sources.resolve import find_in_hf_cache

    path = Path(name).expanduser()
    if path.exists():
        return _path_identity(path, name, synthetic_dtype)
    preset = PRESETS.get(name.lower())
    if preset is not None and preset.gguf_package is not None:  # its installed file, or refused
        from compile_ahead.runtime.sources.packaged_gguf import packaged_gguf

        _check_dtype(name, synthetic_dtype, preset.gguf_package.described)
        return _files_identity(packaged_gguf(preset.gguf_package), name)
    if preset is not None:
        for repo_id in preset.hub_ids:
            cached = find_in_hf_cache(repo_id)
            if cached is not None:
                _check_dtype(name, synthetic_dtype, f"{repo_id} in the local cache")
                return _files_identity(cached, name)
        dtype = synthetic_dtype or preset.dtype
        return {"model": name, "synthetic": identity(preset.name, SYNTHETIC_SEED, dtype)}
    if "/" in name and not name.startswith((".", "/", "~")):
        cached = find_in_hf_cache(name)
        if cached is not None:
            _check_dtype(name, synthetic_dtype, "the local Hugging Face cache")
            return _files_identity(cached, name)
    raise CompileAheadError(
        f"model {name}: not on this machine ({os.uname().nodename}): no such file or directory, "
        "preset or hub id in the local Hugging Face cache"
    )


def identity_difference(expected: dict, found: dict) -> str:
    """What differs between two identities of one model, in a few words."""
    if "synthetic" in expected or "synthetic" in found:
        return f"synthetic {found.get('synthetic')} here, {expected.get('synthetic')} expected"
    mine, theirs = found.get("files", {}), expected.get("files", {})
    names = sorted(n for n in set(mine) | set(theirs) if mine.get(n) != theirs.get(n))
    return f"files differ: {', '.join(names[:4])}" + (" ..." if len(names) > 4 else "")
