"""Hand OpenVINO a model the way users do: saved as IR and read back, weights memory-mapped."""

from __future__ import annotations

from pathlib import Path

import openvino as ov

from compile_ahead.runtime.base.ov_core import core
from compile_ahead.runtime.graphs.decompression import mark_weight_decompression


def through_ir(model: ov.Model, directory: Path) -> ov.Model:
    """Save the model as IR and read it back: its weights become a memory-mapped file.

    That is how users hand OpenVINO an LLM (an optimum export on disk), and NPUW depends on it:
    for qwen2.5-0.5b (B0) it compiled in 4.6 s and held 3.1 GB RSS from an IR, against 9.3-10.6 s
    and 5.2 GB from the same model with in-memory (numpy-backed) constants.
    """
    path = directory / "stateful_model.xml"
    ov.save_model(model, path, compress_to_fp16=False)
    reloaded = core().read_model(path)
    mark_weight_decompression(reloaded)
    return reloaded
