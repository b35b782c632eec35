"""Seeded synthetic weights of a model's exact shapes, drawn in memory (never a real model)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import openvino as ov

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.precision import f32_to_bf16_bits
from compile_ahead.runtime.model.architecture import ModelConfig
from compile_ahead.runtime.model.weight_constants import owned_tensor
from compile_ahead.runtime.model.weights import WeightStore, WeightTensor, expected_shapes


class SyntheticStore(WeightStore):
    """Seeded random weights of a model's exact shapes (never a real model), stored as f16 by
    default; ``dtype`` "bf16" or "f32" stores the same draws at that precision.

    Each tensor is drawn from its own generator seeded by (seed, crc32(name)), so a tensor's
    values do not depend on which others were drawn before it. With ``zeros=True`` every tensor
    is zero-filled lazily (pages never touched), for graph-structure work on huge presets.
    """

    DTYPES = ("f16", "bf16", "f32")

    def __init__(self, cfg: ModelConfig, seed: int = 0, zeros: bool = False, dtype: str = "f16"):
        if dtype not in self.DTYPES:
            raise CompileAheadError(
                f"synthetic weights dtype must be one of {', '.join(self.DTYPES)}, got {dtype!r}"
            )
        self._shapes = expected_shapes(cfg)
        self._seed = seed
        self._zeros = zeros
        self._dtype = dtype
        self._cache: dict[str, WeightTensor] = {}

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def zeros(self) -> bool:
        return self._zeros

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shapes[name]

    def names(self) -> Iterator[str]:
        return iter(self._shapes)

    def identity(self) -> dict[str, Any] | None:
        drawn = {"seed": self._seed, "dtype": self._dtype}
        return {"synthetic_in_memory": drawn} | ({"zeros": True} if self._zeros else {})

    def get(self, name: str) -> WeightTensor:
        if name not in self._cache:
            drawn = self.draw(name)
            if drawn.element_type == ov.Type.bf16:
                # numpy cannot type bf16 for a constant to own: the bits move to OpenVINO
                # memory once, which every graph's constants then share.
                owner = owned_tensor(drawn.element_type, drawn.array)
                drawn = WeightTensor(owner.data.view(np.uint16), drawn.element_type, owner)
            self._cache[name] = drawn
        return self._cache[name]

    def draw(self, name: str) -> WeightTensor:
        """The tensor's values, made afresh and not kept (for streaming them to a file)."""
        shape = self._shapes[name]
        if self._zeros:
            return WeightTensor(np.zeros(shape, np.float16), ov.Type.f16)
        rng = np.random.default_rng([self._seed, zlib.crc32(name.encode())])
        if name.endswith("norm.weight"):
            values = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        else:
            values = 0.02 * rng.standard_normal(shape, dtype=np.float32)
        if self._dtype == "f32":
            return WeightTensor(values, ov.Type.f32)
        if self._dtype == "bf16":
            return WeightTensor(f32_to_bf16_bits(values), ov.Type.bf16)
        return WeightTensor(values.astype(np.float16), ov.Type.f16)
