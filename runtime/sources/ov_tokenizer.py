"""Text <-> token ids through the openvino-tokenizers IRs of an optimum-intel export
(openvino_tokenizer.xml and openvino_detokenizer.xml), compiled on the CPU."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.ir_files import DETOKENIZER_XML, TOKENIZER_XML

if TYPE_CHECKING:
    import openvino as ov


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
        encoder_xml, detok = model_dir / TOKENIZER_XML, model_dir / DETOKENIZER_XML
        for path in (encoder_xml, detok) if detok.is_file() else (encoder_xml,):
            _check_ir_file(path)
        try:
            self._encoder = core.compile_model(str(encoder_xml), "CPU")
            self._decoder = core.compile_model(str(detok), "CPU") if detok.is_file() else None
        except RuntimeError as err:
            raise CompileAheadError(
                f"{model_dir}: cannot load its OpenVINO tokenizer: {openvino_error_summary(err)}"
            ) from None
        _check_interface(self._encoder, encoder_xml, "input_ids", str)
        if self._decoder is not None:
            _check_interface(self._decoder, detok, None, int)

    def encode(self, text: str) -> Encoding:
        out = self._encoder([text])
        ids = out[self._encoder.output("input_ids")]
        return Encoding([int(i) for i in np.asarray(ids).reshape(-1)])

    def decode(self, ids: list[int]) -> str:
        if self._decoder is None:
            raise CompileAheadError(f"no {DETOKENIZER_XML} next to the tokenizer: cannot decode")
        out = self._decoder(np.asarray([ids], np.int64))
        return str(out[self._decoder.output(0)][0])


def _check_ir_file(path: Path) -> None:
    """An OpenVINO IR is XML with a <net> root; anything else is refused here, before OpenVINO
    tries its other front ends on it (TensorFlow's prints parsing noise)."""
    try:
        root = next(ET.iterparse(path, events=("start",)))[1]
    except (OSError, ET.ParseError, StopIteration) as err:
        raise CompileAheadError(f"{path}: not an OpenVINO IR ({err})") from None
    if root.tag != "net":
        raise CompileAheadError(f"{path}: not an OpenVINO IR (its root element is <{root.tag}>)")


def _check_interface(
    compiled: ov.CompiledModel, path: Path, output: str | None, takes: type
) -> None:
    """A tokenizer takes one batch of strings (a detokenizer one of token ids) and gives its
    named output: another model in its place is refused before it runs."""
    inputs = compiled.inputs
    kind = inputs[0].get_element_type().get_type_name() if len(inputs) == 1 else None
    wanted = ("string",) if takes is str else ("i64", "i32")
    outputs = {n for o in compiled.outputs for n in o.get_names()}
    if kind not in wanted or (output is not None and output not in outputs):
        expected = "one string input" if takes is str else "one token-id input"
        if output is not None:
            expected += f" and an {output!r} output"
        raise CompileAheadError(f"{path}: not a tokenizer of this kind (expected {expected})")
