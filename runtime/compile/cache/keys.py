"""A compile cache entry's key: everything a compiled graph depends on (the model's config and
its weights' identity, the graph, the device and its full name, the whole compile config, the
OpenVINO release, the entry format and a digest of the code that shapes graphs), and the graph
identities its callers name."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.sources.base import ModelSource

# Part of every key: entries of another format are never looked up (misses, pruned in time).
FORMAT_VERSION = 4  # an XXH3-128 per chunk of the blob in the trailer (3: one for the whole)
# Packages whose modules shape a compiled graph (how weights are read, how graphs are built
# or cut, how they are compiled): an edit to any of their modules changes every key.
_GRAPH_PACKAGES = ("base", "model", "graphs", "sources", "compile")


@functools.cache
def _code_digest() -> str:
    return code_digest(Path(__file__).resolve().parents[2])


def code_digest(runtime_dir: Path) -> str:
    """A digest of every module of the graph-shaping packages under ``runtime_dir``, taken from
    the package itself (never a hand-kept list, which would miss new or moved modules)."""
    h = hashlib.sha256()
    for package in _GRAPH_PACKAGES:
        for path in sorted((runtime_dir / package).rglob("*.py")):
            rel = path.relative_to(runtime_dir).as_posix()
            h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _openvino_version() -> str:
    import openvino

    return openvino.get_version()


@functools.cache
def _device_name(device: str) -> str:
    from compile_ahead.runtime.base.ov_core import core

    try:
        return str(core().get_property(device, "FULL_DEVICE_NAME"))
    except RuntimeError:
        return device


def _config_repr(config: Mapping[str, object]) -> dict[str, str]:
    return {str(k): str(v) for k, v in sorted(config.items()) if k != "MODEL_PTR"}


def key_payload(
    source: ModelSource,
    graph: Mapping[str, object],
    device: str,
    config: Mapping[str, object],
    weightless: bool,
) -> dict[str, Any] | None:
    """What an entry's key is a digest of; None when the model's weights have no identity."""
    weights = source.weights_identity()
    if weights is None:
        return None
    return {
        "format": FORMAT_VERSION,
        "openvino": _openvino_version(),
        "code": _code_digest(),
        "device": device,
        "device_name": _device_name(device),
        "config": _config_repr(config),
        "weightless": weightless,
        "graph": dict(graph),
        "model": {"config": asdict(source.config), "weights": weights},
    }


def entry_key(payload: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _spec_fields(spec: GraphSpec) -> dict[str, object]:
    """Every field of a spec; batch only when above 1, so batch-1 entries keep their key."""
    fields = asdict(spec)
    if fields["batch"] == 1:
        del fields["batch"]
    return fields


def step_graph_identity(spec: GraphSpec) -> dict[str, object]:
    """A whole decode or prefill graph: every field of its spec (capacity, chunk, KV
    precision, buffer capacity, batch, and any added later)."""
    return {"graph": spec.kind, **_spec_fields(spec)}


def weight_part_identity(index: int, kv_precision: str, batch: int = 1) -> dict[str, object]:
    """A split weight part; batch only when above 1, so batch-1 entries keep their key."""
    identity = {"graph": "weight-part", "index": index, "kv_precision": kv_precision}
    return identity if batch == 1 else {**identity, "batch": batch}


def attention_core_identity(spec: GraphSpec) -> dict[str, object]:
    return {"graph": "attention", **_spec_fields(spec)}
