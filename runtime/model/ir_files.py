"""Locate an OpenVINO IR (an optimum-intel export directory or a bare ``.xml``) and check its
files before OpenVINO reads them, so a broken export fails with one line naming the problem."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from compile_ahead.errors import CompileAheadError

# optimum-intel's file names inside an export directory.
MODEL_XML = "openvino_model.xml"
TOKENIZER_XML = "openvino_tokenizer.xml"
DETOKENIZER_XML = "openvino_detokenizer.xml"


@dataclass(frozen=True)
class IRFiles:
    xml: Path
    bin: Path
    model_dir: Path  # where config.json, generation_config.json and tokenizers may live

    @property
    def config_json(self) -> Path | None:
        path = self.model_dir / "config.json"
        return path if path.is_file() else None


def is_ir_path(path: Path) -> bool:
    """Whether ``--model`` names an IR: a ``.xml`` file or a directory holding an export."""
    if path.is_file():
        return path.suffix.lower() == ".xml"
    return path.is_dir() and (path / MODEL_XML).is_file()


def refuse_onnx(path: Path) -> None:
    if path.suffix.lower() == ".onnx":
        raise CompileAheadError(
            f"{path}: an ONNX model cannot run on the ladder (it needs a stateful decoder IR); "
            "export it with `optimum-cli export openvino --task text-generation-with-past`"
        )


def locate_ir(path: Path) -> IRFiles:
    xml = path / MODEL_XML if path.is_dir() else path
    if not xml.is_file():
        raise CompileAheadError(f"{path}: no {MODEL_XML} here")
    bin_path = xml.with_suffix(".bin")
    if not bin_path.is_file():
        raise CompileAheadError(f"{xml}: its weights file {bin_path.name} is missing")
    check_bin_size(xml, bin_path)
    return IRFiles(xml, bin_path, xml.parent)


def constants_extent(xml: Path) -> int:
    """End of the last byte range the IR's Const layers read from the .bin."""
    end = 0
    try:
        for _, elem in ET.iterparse(xml, events=("end",)):
            if elem.tag == "data" and "offset" in elem.attrib and "size" in elem.attrib:
                end = max(end, int(elem.attrib["offset"]) + int(elem.attrib["size"]))
            elif elem.tag == "layer":
                elem.clear()  # the graph of a large model is big; keep memory flat
    except (ET.ParseError, ValueError) as err:
        raise CompileAheadError(f"{xml}: not a readable OpenVINO IR ({err})") from None
    return end


def check_bin_size(xml: Path, bin_path: Path) -> None:
    """A .bin cut short, or belonging to another .xml, is refused before it is mapped."""
    need = constants_extent(xml)
    have = bin_path.stat().st_size
    if have != need:
        raise CompileAheadError(
            f"{bin_path}: {have} bytes, but {xml.name} reads constants up to byte {need} "
            "(truncated, or not this model's weights)"
        )
