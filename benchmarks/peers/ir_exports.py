"""Random-weight qwen2.5-0.5b exports for benchmarks/peers/ir_vs_genai.py: a transformers random
init saved with save_pretrained (bf16 safetensors), then `optimum-cli export openvino` per weight
format (optimum-intel's defaults for int8 and int4). Reused when already there.

    python benchmarks/peers/ir_exports.py WORKDIR [--formats fp16,int8,int4]

Needs optimum-intel (the ``test`` extra); see pyproject.toml about torchvision.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.models import FORMATS, prepare


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workdir", type=Path)
    p.add_argument("--formats", default=",".join(FORMATS))
    args = p.parse_args(argv)
    for fmt, path in prepare(args.workdir, tuple(args.formats.split(","))).items():
        print(fmt, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
