"""A stateful decoder IR (optimum-intel export) as a model source: rung graphs cut from it,
whole per rung or split at its attentions."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import openvino as ov

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.graphs.ir.cut import build_ir_step_model
from compile_ahead.runtime.graphs.ir.paged_prefill import PagedPrefillStep, paged_prefill_model
from compile_ahead.runtime.graphs.ir.split import cut_weights
from compile_ahead.runtime.graphs.ir.step import IRStep
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.model.file_identity import file_identity, racy_change
from compile_ahead.runtime.model.ir_files import IRFiles, locate_ir
from compile_ahead.runtime.model.ir_reader import ir_config, read_ir, sliding_window, stateless
from compile_ahead.runtime.model.ir_weights import WeightFormat, weight_format
from compile_ahead.runtime.model.weights import WeightStore, WeightTensor
from compile_ahead.runtime.sources.base import ModelSource, ReopenSpec


class NoWeightStore(WeightStore):
    """An IR's weights live in its .bin and run only as its own graph (cut per rung, or split
    at its attentions): our builders (the stateful baseline) cannot take them, and say so."""

    def __init__(self, where: str):
        self.where = where

    def get(self, name: str) -> WeightTensor:
        raise CompileAheadError(
            f"{self.where}: an OpenVINO IR runs only as its own graph, cut per rung or split at "
            "its attentions; the baselines built from weights cannot use it"
        )

    def names(self) -> Iterator[str]:
        return iter(())


@dataclass(frozen=True)
class IRSource(ModelSource):
    """A stateful decoder IR: cut per rung (graphs/ir/cut.py) and driven by graphs/ir/step.py,
    or split at its attentions (graphs/ir/split.py); never rebuilt."""

    files: IRFiles | None = None
    weight_format: WeightFormat = field(default_factory=lambda: WeightFormat(()))
    # The IR builds its mask as if the C past slots were all written before the new tokens; a
    # window then counts from slot C, not from the filled length, so rungs must fit in it.
    sliding_window: int | None = None

    # The IR files as they were when the source was resolved: each rung reads them again, and
    # a rung is never compiled from files that changed since (the compile cache keys on this).
    file_identity: tuple[dict[str, Any], ...] = ()
    identity_ns: int = 0  # time.time_ns() before file_identity was taken

    built_from_weights: ClassVar[bool] = False

    def build_graph(self, spec: GraphSpec) -> ov.Model:
        """The IR read, made stateless and cut to one rung (graphs/ir/cut.py), never rebuilt."""
        self.check_capacity(spec.capacity, spec.chunk)
        if spec.paged:  # the IR as exported, in paged-attention form
            return paged_prefill_model(self._read())
        model, kv = stateless(self._read(), self._where)
        return build_ir_step_model(model, kv, spec)

    def split_weights(self, batch: int, kv_precision: str) -> ov.Model:
        """The IR's weight side for ``batch`` sequences, every attention cut out; its parts
        are graphs/ir/split.py's weight_part."""
        model, kv = stateless(self._read(), self._where)
        return cut_weights(model, kv, self.config, batch, kv_precision, self._where)

    def check_split(self) -> None:
        """Refuse, in one line, an IR whose attention the split cut cannot take."""
        self.split_weights(1, "f32")

    @property
    def _where(self) -> str:
        return str(self.files.xml if self.files is not None else self.name)

    def _read(self) -> ov.Model:
        """The IR as this run opened it (never from files that changed since)."""
        assert self.files is not None
        if _ir_identity(self.files) != self.file_identity:
            raise CompileAheadError(
                f"{self.files.xml}: the IR changed on disk since this run opened it; run again"
            )
        return read_ir(self.files)

    def make_step(self, compiled: ov.CompiledModel, spec: GraphSpec) -> IRStep | PagedPrefillStep:
        if spec.paged:
            return PagedPrefillStep(compiled, spec, self.config.num_layers)
        return IRStep(compiled, spec, self.config.num_layers)

    def reopen(self) -> ReopenSpec:
        assert self.files is not None
        return ReopenSpec(str(self.files.xml))

    def weights_identity(self) -> dict[str, Any] | None:
        return {"ir": list(self.file_identity)}

    def weights_unsettled(self) -> str | None:
        assert self.files is not None
        if _ir_identity(self.files) != self.file_identity:
            return f"{self.files.xml}: the IR changed on disk since this run opened it"
        paths = (self.files.xml, self.files.bin)
        for path, identity in zip(paths, self.file_identity, strict=True):
            if reason := racy_change(path, identity, self.identity_ns):
                return reason
        return None

    def check_capacity(self, capacity: int, chunk: int) -> None:
        if self.sliding_window is not None and capacity + chunk > self.sliding_window:
            raise CompileAheadError(
                f"{self.name}: sliding-window attention (window {self.sliding_window}) cannot "
                f"run a rung of {capacity} slots + {chunk}: rungs must fit in the window"
            )

    @property
    def label(self) -> str:
        return f"{self.name} [OpenVINO IR, {self.weight_format.summary} weights; {self.origin}]"

    def describe(self) -> dict:
        return {
            **super().describe(),
            "model_format": "openvino-ir",
            "weight_format": self.weight_format.summary,
            "weight_format_primary": self.weight_format.primary,
        }


def _ir_identity(files: IRFiles) -> tuple[dict[str, Any], ...]:
    return tuple(file_identity(p, p.stat()) for p in (files.xml, files.bin))


def load_ir(path: Path, name: str) -> IRSource:
    files = locate_ir(path)
    where = str(files.xml)
    identity_ns = time.time_ns()
    identity = _ir_identity(files)
    model, kv = stateless(read_ir(files), where)
    return IRSource(
        name=name,
        config=ir_config(model, kv, files),
        weights=NoWeightStore(where),
        synthetic=False,
        origin=where,
        model_dir=files.model_dir,
        files=files,
        weight_format=weight_format(model),
        sliding_window=sliding_window(files),
        file_identity=identity,
        identity_ns=identity_ns,
    )
