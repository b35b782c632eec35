"""The prefill plan: which graph takes the prompt (token by token on the first rung, static
chunks, or the CPU's dynamic and paged graphs), chosen from the flags and the device."""

from __future__ import annotations

from dataclasses import dataclass

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.compile.settings.device_defaults import PREFILL_CHUNKS, default_prefill
from compile_ahead.runtime.compile.settings.modes import PrefillShape
from compile_ahead.runtime.graphs.spec import GraphSpec

DYNAMIC_SHAPES = (PrefillShape.DYNAMIC, PrefillShape.PAGED)  # CPU paths: data-dependent shapes


@dataclass(frozen=True)
class PrefillPlan:
    """How the prompt is prefilled: ``chunk`` 1 is token by token on the first rung's decode
    graph; larger chunks use a prefill graph, static (the first rung's whole capacity, the last
    chunk padded), dynamic (GraphSpec.dynamic: up to ``chunk`` tokens per call, attending
    over the filled slots only) or paged (GraphSpec.paged: the source's stateful model in
    paged-attention form, its K/V read out of cache blocks)."""

    chunk: int = 1
    shape: PrefillShape = PrefillShape.STATIC  # of the prefill graph
    chosen_by: str = "default"  # "default" (device and prompt length) or "flag"

    @property
    def uses_graph(self) -> bool:
        return self.chunk > 1

    @property
    def path(self) -> str:
        return self.shape if self.uses_graph else "decode-graph"

    def spec(self, capacity: int, kv_precision: str, buffer: int | None = None) -> GraphSpec:
        """The prefill graph's spec on a store of ``capacity`` slots (or a prefix of
        ``buffer`` slots)."""
        return GraphSpec(
            capacity,
            self.chunk,
            kv_precision,
            buffer,
            dynamic=self.shape == PrefillShape.DYNAMIC,
            paged=self.shape == PrefillShape.PAGED,
        )

    def to_json(self) -> dict:
        return {"path": self.path, "chunk": self.chunk, "chosen_by": self.chosen_by}


def check_prefill_flags(
    device: str, chunk: int | None, shape: PrefillShape | None, graph_available: bool = True
) -> None:
    """--prefill-chunk and --prefill-shape against the device and the graph mode (before any
    work): a shape that cannot be honoured (no prefill graph: chunk 1, split graphs) is
    refused, never ignored."""
    if chunk is not None and chunk <= 0:
        raise CompileAheadError("--prefill-chunk must be positive")
    if shape in DYNAMIC_SHAPES and device.upper().startswith("NPU"):
        raise CompileAheadError(
            f"--prefill-shape {shape} has dynamic shapes, which the NPU compiler does not take; "
            "use --prefill-shape static"
        )
    if chunk is not None and chunk > 1 and not graph_available:
        raise CompileAheadError("--prefill-chunk > 1 is not available with --graph split")
    if shape is not None and (chunk == 1 or not graph_available):
        why = "--prefill-chunk 1" if chunk == 1 else "--graph split (a prefill graph is whole)"
        raise CompileAheadError(
            f"--prefill-shape {shape}: {why} prefills token by token through the decode graph, "
            "so there is no prefill graph to shape"
        )


def choose_prefill(
    device: str,
    prompt_len: int,
    first_rung: int,
    chunk: int | None = None,
    shape: PrefillShape | None = None,
    graph_available: bool = True,
) -> PrefillPlan:
    """The prefill for a prompt: the device's measured default (device_defaults.py) unless
    ``chunk`` (--prefill-chunk) or ``shape`` (--prefill-shape) say otherwise (as
    check_prefill_flags checked them). A shape is honoured whatever the prompt's length (a
    prefill graph of that shape takes it)."""
    default = default_prefill(device)
    kind = PrefillShape(shape) if shape is not None else default.shape
    if chunk is not None:
        if chunk > first_rung:
            raise CompileAheadError(
                f"--prefill-chunk {chunk} exceeds the first rung ({first_rung})"
            )
        return PrefillPlan(chunk, kind, "flag")
    if shape is None and (not graph_available or prompt_len < default.min_prompt):
        return PrefillPlan(1, kind, "default")
    # The shape's chunk, spanning at most the first rung (which holds the prompt).
    by = "flag" if shape is not None else "default"
    return PrefillPlan(min(PREFILL_CHUNKS[kind], first_rung), kind, by)
