"""experiment.json, what an `ab` experiment planned: its kind, arms, design and context. Read
to analyse the experiment again (`ab report`, `compare`, a campaign report's cells)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.format_version import version_of
from compile_ahead.profiling.results_format.record_values import loads_finite

EXPERIMENT = "experiment.json"
# Keys every experiment.json holds, with their JSON types (each kind adds its own).
EXPERIMENT_KEYS: dict[str, type] = {"arms": list, "pairs": int, "warmup": int, "ladder": list}


class KindKeys(Protocol):
    """What the reader needs of an experiment kind: its own keys with their JSON types."""

    @property
    def keys(self) -> Mapping[str, type]: ...


def load_experiment(directory: Path, kinds: Mapping[str, KindKeys]) -> dict:
    """experiment.json of a results directory, checked enough to re-analyse it (a kind of
    ``kinds``, its keys typed, every arm named, a version this code reads), or one line that
    says what is wrong with it."""
    path = directory / EXPERIMENT
    if not path.exists():
        raise CompileAheadError(f"{directory}: no {EXPERIMENT} (not an `ab` results dir)")
    try:
        exp = loads_finite(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CompileAheadError(f"{path}: unreadable ({err})") from None
    if not isinstance(exp, dict):
        raise CompileAheadError(f"{path}: not an `ab` experiment (not a JSON object)")
    version_of(exp, path)
    if exp.get("kind") not in kinds:
        raise CompileAheadError(
            f"{path}: not an `ab` experiment (kind {' or '.join(sorted(kinds))})"
        )
    for key, kind in {**EXPERIMENT_KEYS, **kinds[exp["kind"]].keys}.items():
        if not isinstance(exp.get(key), kind):
            raise CompileAheadError(f"{path}: {key} is missing or not a JSON {kind.__name__}")
    if not all(isinstance(a, dict) and isinstance(a.get("name"), str) for a in exp["arms"]):
        raise CompileAheadError(f"{path}: every arm needs a name")
    return exp
