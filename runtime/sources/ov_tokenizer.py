"""Text <-> token ids through the openvino-tokenizers IRs of an optimum-intel export
(openvino_tokenizer.xml and openvino_detokenizer.xml), compiled on the CPU."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.ir_files import DETOKENIZER_XML, TOKENIZER_XML


@dataclass(frozen=True)
class Encoding:
    ids: list[int]  # the same attribute a tokenizers.Encoding has


class OpenVINOTokenizer:
    """encode(text).ids and decode(ids), the interface the commands use of a tokenizer."""

    def __init__(self, model_dir: Path):
        import openvino as ov
        import openvino_tokenizers  # noqa: F401  registers the tokenizer ops with new Cores

        from compile_ahead.runtime.base.ov_core import openvino_error_summary

        core = ov.Core()
        try:
            self._encoder = core.compile_model(str(model_dir / TOKENIZER_XML), "CPU")
            detok = model_dir / DETOKENIZER_XML
            self._decoder = core.compile_model(str(detok), "CPU") if detok.is_file() else None
        except RuntimeError as err:
            raise CompileAheadError(
                f"{model_dir}: cannot load its OpenVINO tokenizer: {openvino_error_summary(err)}"
            ) from None

    def encode(self, text: str) -> Encoding:
        out = self._encoder([text])
        ids = out[self._encoder.output("input_ids")]
        return Encoding([int(i) for i in np.asarray(ids).reshape(-1)])

    def decode(self, ids: list[int]) -> str:
        if self._decoder is None:
            raise CompileAheadError(f"no {DETOKENIZER_XML} next to the tokenizer: cannot decode")
        out = self._decoder(np.asarray([ids], np.int64))
        return str(out[self._decoder.output(0)][0])
