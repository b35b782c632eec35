"""What a profile-compile session is told beyond the run configuration: its own settings, which
graph kinds it profiles, and the prefill graph it profiles on a rung."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from compile_ahead.runtime.compile.settings.device_defaults import PREFILL_CHUNKS, default_prefill

if TYPE_CHECKING:  # openvino must not load before the collector is armed
    from compile_ahead.runtime.ladder.settings.prefill_plan import PrefillPlan

GRAPH_KINDS = {"decode": ("decode",), "prefill": ("prefill",), "both": ("decode", "prefill")}


def graph_kinds(choice: str) -> tuple[str, ...]:
    return GRAPH_KINDS[choice]


def prefill_plan(device: str, capacity: int, chunk: int | None, shape: str | None) -> PrefillPlan:
    """The prefill graph profiled on a rung: the one a run on ``device`` compiles for a long
    prompt (the device's shape and the shape's chunk, device_defaults.py) unless
    --prefill-shape or --prefill-chunk say otherwise. Capped at the rung, as a run's chunk is."""
    from compile_ahead.runtime.compile.settings.modes import PrefillShape
    from compile_ahead.runtime.ladder.settings.prefill_plan import PrefillPlan

    kind = PrefillShape(shape) if shape is not None else default_prefill(device).shape
    size = chunk or PREFILL_CHUNKS[kind]
    return PrefillPlan(min(capacity, size), kind, "default" if shape is None else "flag")


@dataclass(frozen=True)
class ProfileOptions:
    """profile-compile's own settings (what the run configuration does not say), settled by
    the command from its flags."""

    out: Path  # the profile directory, published whole
    model: str
    schedule: str | None  # the schedule whose run is overlaid, if any
    synthetic_dtype: str | None
    graph_kind: str  # a key of GRAPH_KINDS
    shapes: tuple[str, ...]  # --shape items, for a model compiled as it is
    decode_tokens: int | None  # steps timed per rung (without a schedule)
    pass_profile: bool  # time OpenVINO's passes in each profiled compile
    py_spy: bool  # sampled by py-spy (its marker goes in the report)
    steps_per_slice: int
    top: int  # rows of the top-passes table
    invocation: dict[str, object] | None  # how the command was started
    batches: tuple[int, ...] = (1,)  # each rung's decode graph is profiled at each B
