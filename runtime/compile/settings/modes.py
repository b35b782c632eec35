"""The choices a run makes among mechanisms, as enums: how rungs are built (graph mode), where
background compiles run (placement), how a prompt is prefilled (prefill shape) and when the
first rungs compile beside a prefill graph (decode-compile timing). Each value is the flag's
spelling, so it prints and serialises as the user wrote it. device_defaults.py says which one
each device gets when not told."""

from __future__ import annotations

from enum import StrEnum

# A background compile in a compile worker process is killed (and retried in the foreground)
# after this long.
DEFAULT_COMPILE_TIMEOUT_S = 600.0


class GraphMode(StrEnum):
    WHOLE = "whole"  # one graph per rung, each with its own compiled weights
    SPLIT = "split"  # weight parts compiled once, a rung is only its attention core


class PlacementKind(StrEnum):
    """Where background compiles run; each names a Placement class (compile/placements.py)."""

    IN_PROCESS = "in-process"  # a helper thread of this process
    WORKER = "worker"  # a compile worker process at idle priority, imported here


class PrefillShape(StrEnum):
    STATIC = "static"  # the first rung's whole capacity, the last chunk padded (any device)
    DYNAMIC = "dynamic"  # a free token axis attending over the filled slots only (CPU)
    PAGED = "paged"  # the model in the paged-attention form LLMPipeline runs (CPU)


class DecodeCompile(StrEnum):
    """When the rungs a schedule compiles before decoding compile, in a run with a prefill
    graph: beside the prefill graph's compile (and on into the prefill if they take longer),
    while the prompt is prefilled, or after it."""

    WITH_PREFILL_GRAPH = "with-prefill-graph"
    DURING_PREFILL = "during-prefill"
    AFTER_PREFILL = "after-prefill"


def choices(mode: type[StrEnum]) -> list[str]:
    """A mode's spellings, for a command-line flag's choices."""
    return [m.value for m in mode]
