"""Host KV cache for the static graphs: per layer K and V of shape [1, kv_heads, C, head_dim].

The arrays are bound to infer requests as shared tensors (no copy per step), so this object
must stay alive while any request reads them.
"""

from __future__ import annotations

import numpy as np
import openvino as ov

from .config import ModelConfig
from .precision import OV_TYPES, STORAGE_DTYPES


class KVCache:
    def __init__(self, cfg: ModelConfig, capacity: int, precision: str):
        self.cfg = cfg
        self.capacity = capacity
        self.precision = precision
        self.dtype = STORAGE_DTYPES[precision]
        shape = (1, cfg.num_kv_heads, capacity, cfg.head_dim)
        # np.zeros maps fresh pages lazily: only written slots become resident on the host.
        self.keys = [np.zeros(shape, self.dtype) for _ in range(cfg.num_layers)]
        self.values = [np.zeros(shape, self.dtype) for _ in range(cfg.num_layers)]
        self.length = 0  # valid slots

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.keys) + sum(a.nbytes for a in self.values)

    def tensors(self) -> tuple[list[ov.Tensor], list[ov.Tensor]]:
        """Shared-memory tensors over the buffers, typed with the KV precision."""
        t = OV_TYPES[self.precision]
        return (
            [ov.Tensor(a, list(a.shape), t) for a in self.keys],
            [ov.Tensor(a, list(a.shape), t) for a in self.values],
        )

    def write(self, layer: int, start: int, new_k: np.ndarray, new_v: np.ndarray) -> None:
        """Store a chunk's K/V rows [1, kv, n, hd] at slots start..start+n-1."""
        n = new_k.shape[2]
        self.keys[layer][:, :, start : start + n] = new_k.view(self.dtype)
        self.values[layer][:, :, start : start + n] = new_v.view(self.dtype)
