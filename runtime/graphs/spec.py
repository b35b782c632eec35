"""What a step graph is, for every graph kind (built from weights, split, cut from an IR,
paged): its spec (capacity, tokens per call, KV precision, shape) and the names of its inputs
and outputs, which the steps that drive a compiled graph bind by name."""

from __future__ import annotations

from dataclasses import dataclass

INPUT_IDS = "input_ids"
PAST_LENGTH = "past_length"
LAST_INDEX = "last_index"
LOGITS = "logits"


def past_key_name(layer: int) -> str:
    return f"past_key.{layer}"


def past_value_name(layer: int) -> str:
    return f"past_value.{layer}"


def new_key_name(layer: int) -> str:
    return f"new_key.{layer}"


def new_value_name(layer: int) -> str:
    return f"new_value.{layer}"


@dataclass(frozen=True)
class GraphSpec:
    capacity: int  # C: past KV slots the graph reads
    chunk: int = 1  # L: tokens per call (1 = decode step)
    kv_precision: str = "f32"
    # Slots of the bound KV buffer when larger than ``capacity``: the graph then reads the
    # buffer's first ``capacity`` slots (a shared top-capacity reservation, b1/i3).
    buffer_capacity: int | None = None
    # A prefill graph whose token count is free (up to ``chunk``) and whose attention reads
    # only the ``past_length`` filled slots, so a chunk never scores the empty part of the
    # capacity. Its inner shapes follow the data: a CPU path (device_defaults.py), not NPU.
    dynamic: bool = False
    # A prefill graph that is the source's stateful decoder turned into the paged-attention
    # form LLMPipeline runs (graphs/ir/paged_prefill.py): the plugin's PagedAttention kernel over
    # the filled slots, K/V in block tensors the step owns. CPU only, like ``dynamic``.
    paged: bool = False
    # Sequences per call (B): past K/V [B, kv, C, hd], each sequence with its own past length.
    # Static graphs only; dynamic and paged prefill graphs take one sequence.
    batch: int = 1

    def __post_init__(self) -> None:
        if self.batch < 1 or (self.batch > 1 and (self.dynamic or self.paged)):
            raise ValueError(f"a {self.kind} graph takes batch 1, got batch {self.batch}")

    @property
    def input_capacity(self) -> int:
        return max(self.capacity, self.buffer_capacity or 0)

    @property
    def kind(self) -> str:
        return "decode" if self.chunk == 1 and not (self.dynamic or self.paged) else "prefill"
