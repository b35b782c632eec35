"""What the compile cache's tests share: a checkpoint whose weights give other tokens at the
same size, and the one-line warning the cache prints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def _lm_head_span(path: Path) -> tuple[int, int]:
    with path.open("rb") as f:
        (length,) = np.frombuffer(f.read(8), "<u8")
        header = json.loads(f.read(int(length)))
    begin, end = header["lm_head.weight"]["data_offsets"]
    return 8 + int(length) + begin, 8 + int(length) + end


def other_weights(path: Path) -> bytes:
    """The file's bytes with the output projection negated: same size, other tokens."""
    data = bytearray(path.read_bytes())
    begin, end = _lm_head_span(path)
    data[begin:end] = (-np.frombuffer(bytes(data[begin:end]), np.float32)).tobytes()
    return bytes(data)


def warning_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "warning" in line.lower()]


def assert_one_line_warning(err: str, *words: str) -> None:
    """Exactly one warning, printed as one plain line (no Python source line)."""
    lines = warning_lines(err)
    assert len(lines) == 1, err
    assert lines[0].startswith("compile-ahead: warning: "), err
    assert "CompileCacheWarning" not in err and "warnings.warn" not in err
    for word in words:
        assert word in lines[0], err
