"""The precision names users type, in a module that imports nothing: the command-line parser
offers them as choices without loading numpy (precision.py, which maps them to OpenVINO
element types and numpy dtypes, does)."""

from __future__ import annotations

PRECISIONS = ("f32", "f16", "bf16")
